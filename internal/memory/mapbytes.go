package memory

import (
	"math/bits"
	"os"
)

// Map types and flags as the kernel numbers them (uapi/linux/bpf.h), as
// fdinfo prints them.
const (
	mapHash        = 1
	mapArray       = 2
	mapArrayOfMaps = 12
	mapPerCPUHash  = 5
	mapPerCPUArray = 6
	mapLRUHash     = 9
	mapLRUCPUHash  = 10
	mapQueue       = 22
	mapStack       = 23
	mapRingBuf     = 27

	// FlagNoPrealloc is BPF_F_NO_PREALLOC: a hash map whose elements are
	// allocated (and charged) as they are inserted.
	FlagNoPrealloc = 1
	// FlagMmapable is BPF_F_MMAPABLE: an array allocated in whole pages.
	FlagMmapable = 0x400
)

// A MapShape is what the kernel's memory for a BPF map depends on: its
// type, key and value sizes, entries and flags (fdinfo prints them all).
type MapShape struct {
	Type, KeySize, ValueSize, MaxEntries, Flags uint32
}

// Bytes is the kernel's memory for a map of this shape on a machine of
// cpus possible CPUs, following its own accounting (map_mem_usage, Linux
// 6.4+, per map type): most when full, idle when empty. They differ only
// for a hash created with FlagNoPrealloc, whose bucket array is allocated
// at creation and each element (its header, key and value, and a free-list
// node) as it is inserted (bpf_mem_alloc, 6.1+); every other map is
// allocated whole at creation. Elements are laid out as the kernel lays
// them out: 8-byte aligned values, hash elements with their 48-byte
// header and one spare element per CPU when preallocated, power-of-two
// bucket arrays of 16-byte buckets.
func (s MapShape) Bytes(cpus int) (most, idle uint64) {
	n := uint64(s.MaxEntries)
	val := uint64(s.ValueSize+7) &^ 7
	key := uint64(s.KeySize+7) &^ 7
	page := uint64(os.Getpagesize())
	ncpu := uint64(max(cpus, 1))
	switch s.Type {
	case mapArray, mapArrayOfMaps:
		if s.Flags&FlagMmapable != 0 {
			b := (n*val+page-1)&^(page-1) + page
			return b, b
		}
		return n*val + 328, n*val + 328
	case mapPerCPUArray:
		b := n*val*ncpu + 328
		return b, b
	case mapHash, mapLRUHash, mapPerCPUHash, mapLRUCPUHash:
		// struct bpf_htab, and its per-CPU lock counters.
		fixed := uint64(1000) + buckets(n)*16
		elem := 48 + key + val
		percpu := s.Type == mapPerCPUHash || s.Type == mapLRUCPUHash
		if percpu {
			elem = 48 + key + 8
		}
		if s.Type == mapHash || s.Type == mapPerCPUHash {
			if s.Flags&FlagNoPrealloc != 0 {
				// Charged per element, with its free-list node.
				per := elem + 8
				if percpu {
					per += 16 + val*ncpu
				}
				return fixed + n*per, fixed
			}
		}
		elems := n
		if s.Type == mapHash {
			elems += ncpu // the per-CPU extra elements of a preallocated hash
		}
		if percpu {
			b := fixed + elems*elem + elems*val*ncpu
			return b, b
		}
		return fixed + elems*elem, fixed + elems*elem
	case mapQueue, mapStack:
		b := (n+1)*uint64(s.ValueSize) + 312
		return b, b
	case mapRingBuf:
		// The data pages, mapped twice but charged once, and the array
		// of their page pointers.
		b := n + n/page*8 + 2*page + 4096
		return b, b
	}
	b := n*(key+val) + 1000
	return b, b
}

// buckets is a hash map's bucket count for n entries.
func buckets(n uint64) uint64 {
	return uint64(1) << bits.Len64(max(n, 1)-1)
}
