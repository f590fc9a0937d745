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
	for _, st := range r.order {
		if st.dead || now.Sub(st.lastChange) <= idle {
			continue
		}
		k := st.key
		if err := r.objs.SeriesIndex.Delete(&k); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
			r.log.Warn("series_evict_failed", "series", keyString(st.name, st.key), "error", err)
			continue
		}
		for _, slot := range st.slots {
			// Late values (from programs that looked the slot up just
			// before) find no state and make their key's series anew
			// (stateOfSlot); a slot is quarantined once.
			r.slotState[slot] = nil
			if r.inQuarantine[slot] {
				continue
			}
			r.inQuarantine[slot] = true
			r.quarantine = append(r.quarantine, quarantined{slot: slot, key: st.key, since: now})
			r.nameRefs[st.key.NameId]++
		}
		st.slots = nil
		r.forget(st)
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
	if r.compat {
		// Cells of the compat core inserted after the last read are
		// known to no slotCells yet: note them, so that drain counts
		// them and free deletes them (a key left in cell_counts would
		// add its counts to the slot's next series).
		only := make(map[uint32]bool, len(done))
		for _, q := range done {
			only[q.slot] = true
		}
		if err := r.readCellCounts(only); err != nil {
			r.log.Warn("slot_free_failed", "error", err, "effect", "slots stay in quarantine")
			r.quarantine = append(r.quarantine, done...)
			return
		}
	}
	for _, q := range done {
		r.drain(q.slot)
		r.free(q.slot, q.key)
	}
}

// forget drops a series from the snapshots: it keeps its slots' states
// until they are freed, so late values still find their key.
func (r *seriesReader) forget(st *seriesState) {
	delete(r.byKey, st.key)
	st.dead = true
	r.dead++
	r.nameRefs[st.key.NameId]--
}

// drain takes what programs that found a quarantined slot before it left
// the index added to it: they count for its series in the next snapshot.
func (r *seriesReader) drain(slot uint32) {
	pending := atomic.LoadUint64(&r.slots[slot].Count) != r.slotPrev[slot].count
	var counts map[uint32]uint64 // the compat core's cells: key -> growth
	for _, c := range r.slotCells[slot] {
		if r.compat {
			var total uint64
			if err := r.objs.CellCounts.Lookup(c, &total); err == nil && total != r.cellPrev[c] {
				if counts == nil {
					counts = map[uint32]uint64{}
				}
				counts[c] = total - r.cellPrev[c]
				r.cellPrev[c] = total
				pending = true
			}
			continue
		}
		if uint32(atomic.LoadUint64(&r.cells[c])) != 0 {
			pending = true
		}
	}
	if !pending {
		return
	}
	// The late values go to the key's live series, made anew if need be.
	key := r.slots[slot].Key
	st := r.byKey[key]
	if st == nil {
		st = &seriesState{key: key, name: r.nameOf(key.NameId), lastChange: time.Now()}
		r.byKey[key] = st
		r.order = append(r.order, st)
		r.nameRefs[key.NameId]++
	}
	a := &st.acc
	r.take(slot, a)
	for key, n := range counts {
		a.hist = append(a.hist, cellCount{key & (1<<cellFieldBits - 1), n})
	}
	for _, c := range r.slotCells[slot] {
		if r.compat {
			break
		}
		ck, n := swapCount(&r.cells[c])
		if n == 0 || ck>>cellFieldBits-1 != slot {
			continue
		}
		a.hist = append(a.hist, cellCount{ck & (1<<cellFieldBits - 1), uint64(n)})
	}
}

func (r *seriesReader) free(slot uint32, key bpf.SpanwatchSeriesKey) {
	r.inQuarantine[slot] = false
	for _, c := range r.slotCells[slot] {
		if r.compat {
			// c is a key of cell_counts: the slot's cell goes.
			if err := r.objs.CellCounts.Delete(c); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
				r.log.Warn("cell_free_failed", "slot", slot, "error", err)
			}
			delete(r.cellPrev, c)
			continue
		}
		if atomic.LoadUint64(&r.cells[c])>>(32+cellFieldBits) == uint64(slot+1) {
			atomic.StoreUint64(&r.cells[c], 0)
		}
	}
	r.slotCells[slot] = nil
	r.slotPrev[slot] = slotTotals{}
	sl := &r.slots[slot]
	// The workload the kernel charged the series to: 0 for an "(other)"
	// series, charged to none.
	cg := atomic.LoadUint64(&sl.QuotaCg)
	atomic.StoreUint64(&sl.State, 0)
	for _, p := range []*uint64{&sl.Count, &sl.Errors, &sl.Sum, &sl.OverBudget, &sl.MinInv, &sl.Max, &sl.Budget, &sl.QuotaCg} {
		atomic.StoreUint64(p, 0)
	}
	sl.Key = bpf.SpanwatchSeriesKey{}
	if st := r.slotState[slot]; st != nil {
		slots := st.slots[:0]
		for _, s := range st.slots {
			if s != slot {
				slots = append(slots, s)
			}
		}
		st.slots = slots
	}
	r.slotState[slot] = nil
	if cg != 0 {
		var released uint64
		if err := r.objs.CgReleased.Lookup(&cg, &released); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
			r.log.Warn("quota_release_failed", "cgroup_id", cg, "error", err)
		}
		released++
		var created uint64
		if err := r.objs.CgCreated.Lookup(&cg, &created); err == nil && released >= created {
			// Every series the cgroup created is gone: forget it, so
			// the two maps hold live cgroups only and a node's churn
			// of containers never fills them (a full cg_created
			// would leave new cgroups without a quota).
			r.forgetCgroup(cg)
		} else if err := r.objs.CgReleased.Update(&cg, &released, ebpf.UpdateAny); err != nil {
			r.log.Warn("quota_release_failed", "cgroup_id", cg, "error", err)
		}
	}
	if err := r.objs.FreeSlots.Update(nil, &slot, ebpf.UpdateAny); err != nil {
		// The slot is lost to reuse until restart; its memory is not.
		r.log.Warn("slot_free_failed", "slot", slot, "error", err)
	}
	r.nameRefs[key.NameId]--
	r.pruneName(key.NameId)
}

// pruneName forgets a name no series uses any more: the kernel's names
// entry, the cache and, for a name a resolver gave, its count in
// r.resolved. A program that creates a series of the name again
// writes it again.
func (r *seriesReader) pruneName(id uint64) {
	if r.nameRefs[id] > 0 || id == r.otherNameID {
		return
	}
	delete(r.nameRefs, id)
	if n, ok := r.names[id]; ok && r.resolvedIDs[id] {
		delete(r.resolvedIDs, id)
		if r.resolved[n]--; r.resolved[n] <= 0 {
			delete(r.resolved, n)
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
	if r.globExact[id] != nil {
		// The budget a glob gave it (compat core), in the set in force;
		// the caller holds c.mu, as a change does when it switches sets.
		delete(r.globExact, id)
		set := atomic.LoadUint32(&r.core.BudgetGen) >> budgetSetShift & 1
		k := bpf.SpanwatchBudgetKey{NameId: id, Set: set}
		if err := r.objs.Budgets.Delete(&k); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
			r.log.Warn("name_prune_failed", "name_id", id, "error", err)
		} else {
			delete(r.sets[set].ids, id)
		}
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

// forgetCgroup deletes a workload's quota counts, creations first: a
// series the kernel creates meanwhile starts a fresh count.
func (r *seriesReader) forgetCgroup(cg uint64) {
	for _, m := range []*ebpf.Map{r.objs.CgCreated, r.objs.CgReleased} {
		if err := m.Delete(&cg); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
			r.log.Warn("quota_release_failed", "cgroup_id", cg, "error", err)
		}
	}
}
