//go:build linux

package collector

import (
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"

	"github.com/spanwatch/spanwatch/internal/kernel"
	"github.com/spanwatch/spanwatch/internal/memory"
)

// The histogram cells are kept in banks (bpf/aggregate.h, cell_banks):
// bank b serves the series slots from b * slots, an open-addressed table
// of its own, so that a bank never rehashes and the cells of an idle
// agent are one bank instead of the whole table. Slots are taken
// lowest first (a freed one before a never-used one), so the slots in use
// stay below core_state.next_slot, and banks are created ahead of it.
const (
	// bankMinSlots is the fewest slots a bank serves (but for a
	// capacity below it): with the half bank kept ahead, the new series
	// a burst can make before the next bank is there; past them, their
	// values go to a bank that is (reclaimSpilled frees those cells).
	bankMinSlots = 512
	// bankMinChunks is the smallest bank, 1 MiB (but for a table
	// smaller than it: one bank): a table that small is not worth
	// cutting. A burst of new series faster than bankPoll spills into
	// the banks there: 30,000 at once in an idle agent's one bank
	// (131,072 cells) lose none, 40,000 lose about one value and
	// 100,000 about twenty (BENCHMARKS.md, "A burst of new series").
	bankMinChunks = 1 << 20 / (8 * 8)
	// bankPoll is how often the collector looks at the slots in use to
	// create banks ahead of them: an atomic load of mapped memory.
	bankPoll = 50 * time.Millisecond
)

// bankPlan is how cfg's histogram cells are cut in banks.
type bankPlan struct {
	chunks uint32 // cell chunks a bank: a power of two
	slots  uint32 // series slots a bank serves
	banks  uint32 // banks the capacity needs
}

// cellBanks cuts HistogramCells (a power of two) in the most banks (a
// power of two) that still serve bankMinSlots slots each and hold
// bankMinChunks each: as many cells a slot as one table of them all.
// 68,217 series and 2^24 cells (the 1 GiB default) make 128 banks of 1
// MiB, 533 slots each.
func (cfg *Config) cellBanks() bankPlan {
	chunks := max(cfg.HistogramCells/uint32(cellsPerChunk), 1)
	n := uint32(1)
	for 2*n <= cfg.MaxSeries/bankMinSlots && chunks/(2*n) >= bankMinChunks {
		n *= 2
	}
	slots := (cfg.MaxSeries + n - 1) / n
	return bankPlan{chunks: chunks / n, slots: slots, banks: (cfg.MaxSeries + slots - 1) / slots}
}

// ahead is the banks that must exist when hwm slots were ever taken:
// those of the slots in use and of the next half bank's, so that new
// series find their cells in place. An idle agent has one. (grow asks
// for more while slots are being taken fast.)
func (p bankPlan) ahead(hwm uint64) uint32 {
	return uint32(min((hwm+uint64(p.slots)/2)/uint64(p.slots)+1, uint64(p.banks)))
}

// bankSpec is the spec of one bank, the inner map cell_banks was created
// with.
func (p bankPlan) bankSpec() *ebpf.MapSpec {
	return &ebpf.MapSpec{Name: "cell_bank", Type: ebpf.Array, KeySize: 4,
		ValueSize: uint32(cellsPerChunk * 8), MaxEntries: p.chunks, Flags: unix.BPF_F_MMAPABLE}
}

// sizeCellBanks sizes the cell banks of a core's spec: their count (the
// outer map) is in mapSizes, a bank here. The compat core keeps them
// empty: its inner map stays the object's (one chunk).
//
// The inner map is the one every bank is created from (bankSpec), with
// no BTF: the kernel puts a bank in cell_banks only if it matches the
// inner map cell_banks was created with, and before 6.2 that compares
// where a bpf_timer is in the value, which is -EINVAL for a map created
// without BTF and -ENOENT for one created with it (Debian's 6.1: "put
// cell bank 0: update: invalid argument").
func sizeCellBanks(spec *ebpf.CollectionSpec, cfg *Config, core kernel.Core) {
	ms := spec.Maps[mapCellBanks]
	if ms == nil || ms.InnerMap == nil || core == kernel.CoreCompat {
		return
	}
	ms.InnerMap = cfg.cellBanks().bankSpec()
}

const mapCellBanks = "cell_banks"

// bankSet is the banks of cell_banks this collector created, mapped one
// after the other into one reserved range of our memory, so that the
// cells of every bank are one slice: cell i of bank b at b * cells a bank
// + i. The ranges of banks not created yet are reserved, never touched:
// their dirty bits are never set.
type bankSet struct {
	plan   bankPlan
	outer  *ebpf.Map
	next   *atomic.Uint64 // core_state.next_slot
	made   *uint32        // core_state.banks_made
	region []byte         // the reserved range, the size of every bank

	mu    sync.Mutex
	banks []*ebpf.Map // created, in bank order
	seen  uint64      // next_slot at the last grow
	err   error       // the first failure, logged once

	stop    chan struct{}
	done    chan struct{}
	started bool
}

// newBankSet reserves the range of every bank, creates the first banks
// and starts the goroutine that creates the others ahead of the slots.
func newBankSet(plan bankPlan, outer *ebpf.Map, next *uint64, made *uint32, log logger) (*bankSet, error) {
	size := int(plan.banks) * int(plan.chunks) * cellsPerChunk * 8
	region, err := unix.Mmap(-1, 0, size, unix.PROT_NONE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS|unix.MAP_NORESERVE)
	if err != nil {
		return nil, fmt.Errorf("reserve the histogram cells' range: %w", err)
	}
	b := &bankSet{plan: plan, outer: outer, next: (*atomic.Uint64)(unsafe.Pointer(next)), made: made, region: region,
		stop: make(chan struct{}), done: make(chan struct{})}
	if err := b.grow(); err != nil {
		b.close()
		return nil, err
	}
	b.started = true
	go b.run(log)
	return b, nil
}

// cells returns every bank's cells, those of banks not created yet
// included (never to be read).
func (b *bankSet) cells() []uint64 {
	return unsafe.Slice((*uint64)(unsafe.Pointer(&b.region[0])), len(b.region)/8)
}

func (b *bankSet) run(log logger) {
	defer close(b.done)
	t := time.NewTicker(bankPoll)
	defer t.Stop()
	for {
		select {
		case <-b.stop:
			return
		case <-t.C:
		}
		if err := b.grow(); err != nil {
			b.mu.Lock()
			first := b.err == nil
			if first {
				b.err = err
			}
			b.mu.Unlock()
			if first {
				log.Warn("cell_bank_failed", "error", err, "effect", "the values of new series go to the banks made, or are counted as histogram_full")
			}
		}
	}
}

// grow creates the banks the slots taken so far need (ahead). A bank is
// mapped into its place in the range before it is put in cell_banks:
// before any program can write it, so before any of its dirty bits is
// set.
//
// While series are being created, the banks are made ahead of the slots
// by four times what the last poll saw taken: a burst (bench/memory/fill
// makes 131,072 series in a second, 7,000 a poll) then spills into the
// banks made mostly in its first poll, and a quiet agent keeps half a
// bank ahead.
func (b *bankSet) grow() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	hwm := b.next.Load()
	rate := hwm - min(b.seen, hwm)
	b.seen = hwm
	want := b.plan.ahead(hwm + 4*rate)
	for uint32(len(b.banks)) < want {
		i := uint32(len(b.banks))
		m, err := ebpf.NewMap(b.plan.bankSpec())
		if err != nil {
			return fmt.Errorf("create cell bank %d: %w", i, err)
		}
		bytes := uintptr(b.plan.chunks) * uintptr(cellsPerChunk*8)
		at := unsafe.Pointer(&b.region[uintptr(i)*bytes])
		if _, err := unix.MmapPtr(m.FD(), 0, at, bytes, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_FIXED); err != nil {
			m.Close()
			return fmt.Errorf("map cell bank %d: %w", i, err)
		}
		if err := b.outer.Put(i, m); err != nil {
			// Give the range back to the reservation.
			unix.MmapPtr(-1, 0, at, bytes, unix.PROT_NONE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS|unix.MAP_NORESERVE|unix.MAP_FIXED)
			m.Close()
			return fmt.Errorf("put cell bank %d: %w", i, err)
		}
		b.banks = append(b.banks, m)
		atomic.StoreUint32(b.made, uint32(len(b.banks)))
	}
	return nil
}

// maps returns the banks created so far.
func (b *bankSet) maps() []*ebpf.Map {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]*ebpf.Map(nil), b.banks...)
}

// mapBytes is the memory the kernel charges for the banks created so
// far, from their fdinfo as memory.MapInfoBytes counts it.
func (b *bankSet) mapBytes() uint64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	var total uint64
	for _, m := range b.banks {
		if s, err := os.ReadFile(fmt.Sprintf("/proc/self/fdinfo/%d", m.FD())); err == nil {
			total += memory.MapInfoBytes(string(s))
		}
	}
	return total
}

// stopGrowing stops the goroutine that creates banks ahead of the slots.
func (b *bankSet) stopGrowing() {
	if b.started {
		b.started = false
		close(b.stop)
		<-b.done
	}
}

func (b *bankSet) close() {
	b.stopGrowing()
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.region != nil {
		unix.Munmap(b.region)
		b.region = nil
	}
	for _, m := range b.banks {
		m.Close()
	}
	b.banks = nil
}

// spilled tells whether cell holds a key of slot outside the slot's own
// bank: a value that came while that bank was not made yet.
func (b *bankSet) spilled(cell, slot uint32) bool {
	return cell/(b.plan.chunks*uint32(cellsPerChunk)) != slot/b.plan.slots
}

// madeCount is the number of banks made so far.
func (b *bankSet) madeCount() uint32 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return uint32(len(b.banks))
}

// reclaimSpilled frees the cells that took values of slots whose bank was
// not made yet, once it is: no program adds to them after it looked the
// bank up (an RCU grace period, membarrier, after the bank was there), so
// a cell whose count this read took is empty for good. One whose count
// grew since is left for the next read to take. Left alone, they would
// take the room of their bank's own slots for as long as their series
// live.
func (r *seriesReader) reclaimSpilled() {
	if len(r.spilled) == 0 {
		return
	}
	made := r.banks.madeCount() // before the grace period
	// home tells whether cell c still holds a key out of its slot's
	// bank (not: freed with its slot, maybe taken by a slot of its own
	// bank since), and whether that bank is made.
	home := func(c uint32) (key uint32, out, ok bool) {
		key = uint32(atomic.LoadUint64(&r.cells[c]) >> 32)
		if key == 0 {
			return 0, false, false
		}
		slot := key>>cellFieldBits - 1
		return key, r.banks.spilled(c, slot), slot/r.banks.plan.slots < made
	}
	ready := false
	for c := range r.spilled {
		if _, out, ok := home(c); !out {
			delete(r.spilled, c)
		} else if ok {
			ready = true
		}
	}
	if !ready {
		return
	}
	if err := membarrierGlobal(); err != nil {
		r.log.Warn("membarrier_failed", "error", err, "effect", "cells of a burst of new series stay where they went")
		return
	}
	for c := range r.spilled {
		key, out, ok := home(c)
		if !out || !ok {
			continue
		}
		if atomic.CompareAndSwapUint64(&r.cells[c], uint64(key)<<32, 0) {
			delete(r.spilled, c)
		}
	}
}
