package snapshot

import "encoding/binary"

// NameLen is the size of a span name in the span event payload; longer
// names are truncated to it.
const NameLen = 64

// NameID returns the id the BPF programs give a span name: a 64-bit hash of
// the name's 8-byte words up to its first NUL. It must match span_name_id()
// in bpf/aggregate.h; the collector's tests check that it does.
func NameID(name string) uint64 {
	var buf [NameLen]byte
	copy(buf[:], name)
	return NameIDBytes(&buf)
}

// NameIDBytes is NameID for a name already laid out as in the payload.
func NameIDBytes(name *[NameLen]byte) uint64 {
	h := uint64(0xcbf29ce484222325)
	for i := 0; i < NameLen/8; i++ {
		x := binary.LittleEndian.Uint64(name[i*8:])
		z := (x - 0x0101010101010101) & ^x & 0x8080808080808080
		last := false
		if z != 0 {
			lowest := z & (^z + 1)
			x &= (lowest >> 7) - 1
			last = true
		}
		h ^= x
		h *= 0x100000001b3
		if last {
			break
		}
	}
	h ^= h >> 33
	h *= 0xff51afd7ed558ccd
	h ^= h >> 33
	if h == 0 {
		return 1
	}
	return h
}

// NameString returns the name in a payload name field: the bytes up to the
// first NUL, or all of them.
func NameString(name []byte) string {
	for i, c := range name {
		if c == 0 {
			return string(name[:i])
		}
	}
	return string(name)
}
