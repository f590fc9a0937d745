//go:build linux

package collector

import (
	"errors"
	"sync/atomic"
	"time"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"

	"github.com/spanwatch/spanwatch/bpf"
)

// Eviction, without ever moving a count from one series to another.
//
// A series idle for Config.IdleEvict leaves series_index, so no program
// finds its slot any more; but a program that looked the slot up just
// before may still be about to add to it (programs are preemptible). The
// slot therefore waits in quarantine: its values still count for its
// series, and it is freed only after at least two reads and two seconds,
// and after membarrier(MEMBARRIER_CMD_GLOBAL), which waits for an RCU grace
// period: every non-sleepable program run that began before it has ended.
// A slot that received values during quarantine goes back into the index
// (its series is alive after all). Freeing clears the slot's histogram
// cells, zeroes it, gives the cgroup's quota back and pushes the slot on
// free_slots for the programs to reuse.
const (
	quarantineReads = 2
	quarantineTime  = 2 * time.Second
)

func (r *seriesReader) evict(now time.Time, idle time.Duration) {
	r.releaseQuarantined(now)
	if idle <= 0 {
		return
	}
	for key, st := range r.series {
		if now.Sub(st.lastChange) <= idle {
			continue
		}
		k := key
		if err := r.objs.SeriesIndex.Delete(&k); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
			r.log.Warn("series_evict_failed", "series", keyString(st.name, key), "error", err)
			continue
		}
		for _, slot := range st.slots {
			r.quarantine = append(r.quarantine, quarantined{slot: slot, key: key, since: now})
		}
		delete(r.series, key)
	}
}

func (r *seriesReader) releaseQuarantined(now time.Time) {
	ready := 0
	for i := range r.quarantine {
		q := &r.quarantine[i]
		q.reads++
		if q.reads >= quarantineReads && now.Sub(q.since) >= quarantineTime {
			ready++
		}
	}
	if ready == 0 {
		return
	}
	if err := membarrierGlobal(); err != nil {
		r.log.Warn("membarrier_failed", "error", err, "effect", "slots stay in quarantine")
		return
	}
	var kept, done []quarantined
	for _, q := range r.quarantine {
		if q.reads < quarantineReads || now.Sub(q.since) < quarantineTime {
			kept = append(kept, q)
		} else {
			done = append(done, q)
		}
	}
	r.quarantine = kept
	for _, q := range done {
		r.drain(q.slot)
		r.free(q.slot, q.key)
	}
}

// drain takes what programs that found a quarantined slot before it left
// the index added to it: they count for its series in the next snapshot.
func (r *seriesReader) drain(slot uint32) {
	pending := atomic.LoadUint64(&r.slots[slot].Count) != 0
	for _, c := range r.slotCells[slot] {
		if uint32(atomic.LoadUint64(&r.cells[c])) != 0 {
			pending = true
		}
	}
	if !pending {
		return
	}
	st := r.readSlot(slot, time.Time{})
	if st == nil {
		return
	}
	for _, c := range r.slotCells[slot] {
		key, n := swapCount(&r.cells[c])
		if n == 0 || key>>cellFieldBits-1 != slot {
			continue
		}
		if st.acc.hist == nil {
			st.acc.hist = map[uint32]uint64{}
		}
		st.acc.hist[key&(1<<cellFieldBits-1)] += uint64(n)
	}
	slots := st.slots[:0]
	for _, s := range st.slots {
		if s != slot {
			slots = append(slots, s)
		}
	}
	st.slots = slots
}

func (r *seriesReader) free(slot uint32, key bpf.SpanwatchSeriesKey) {
	for _, c := range r.slotCells[slot] {
		if atomic.LoadUint64(&r.cells[c])>>(32+cellFieldBits) == uint64(slot+1) {
			atomic.StoreUint64(&r.cells[c], 0)
		}
	}
	delete(r.slotCells, slot)
	sl := &r.slots[slot]
	atomic.StoreUint64(&sl.State, 0)
	for _, p := range []*uint64{&sl.Count, &sl.Errors, &sl.Sum, &sl.OverBudget, &sl.MinInv, &sl.Max, &sl.Budget} {
		atomic.StoreUint64(p, 0)
	}
	sl.Key = bpf.SpanwatchSeriesKey{}
	r.slotKnown[slot] = false
	r.slotKey[slot] = bpf.SpanwatchSeriesKey{}
	if key.NameId != r.otherNameID {
		var released uint64
		cg := key.CgroupId
		if err := r.objs.CgReleased.Lookup(&cg, &released); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
			r.log.Warn("quota_release_failed", "cgroup_id", cg, "error", err)
		}
		released++
		if err := r.objs.CgReleased.Update(&cg, &released, ebpf.UpdateAny); err != nil {
			r.log.Warn("quota_release_failed", "cgroup_id", cg, "error", err)
		}
	}
	if err := r.objs.FreeSlots.Update(nil, &slot, ebpf.UpdateAny); err != nil {
		// The slot is lost to reuse until restart; its memory is not.
		r.log.Warn("slot_free_failed", "slot", slot, "error", err)
	}
	r.pruneName(key.NameId)
}

// pruneName forgets a name no series uses any more: the kernel's names
// entry and the cache. A program that creates a series of the name again
// writes it again.
func (r *seriesReader) pruneName(id uint64) {
	for k := range r.series {
		if k.NameId == id {
			return
		}
	}
	for _, q := range r.quarantine {
		if q.key.NameId == id {
			return
		}
	}
	if n, ok := r.names[id]; ok {
		r.pruned[id] = n
		if len(r.pruned) > 4096 {
			clear(r.pruned)
			r.pruned[id] = n
		}
	}
	delete(r.names, id)
	if err := r.objs.Names.Delete(id); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
		r.log.Warn("name_prune_failed", "name_id", id, "error", err)
	}
}

// membarrierGlobal waits for an RCU grace period (MEMBARRIER_CMD_GLOBAL,
// Linux 4.16+; refused on nohz_full kernels, where slots then stay in
// quarantine and are reported).
func membarrierGlobal() error {
	const cmdGlobal = 1
	_, _, errno := unix.Syscall(unix.SYS_MEMBARRIER, cmdGlobal, 0, 0)
	if errno != 0 {
		return errno
	}
	return nil
}
