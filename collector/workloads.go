//go:build linux

package collector

import (
	"errors"

	"github.com/cilium/ebpf"

	"github.com/spanwatch/spanwatch/internal/cgroup"
)

// A workloadSource tells the workload of every cgroup it knows
// (*cgroup.Resolver does; see cgroup.Workload). With one, the series quota
// is charged per workload; without, per cgroup.
type workloadSource interface {
	Workloads() (map[uint64]cgroup.Workload, int)
}

// workloads mirrors into cg_workload what the resolver knows of
// workloads, for the kernel to charge each new series to its workload
// (bpf/aggregate.h, quota_owner).
type workloads struct {
	walks   int               // the resolver's walk count at the last sync
	written map[uint64]uint64 // what cg_workload holds
	full    bool              // a write found it full (logged once)
}

// syncWorkloads writes the resolver's workloads into cg_workload when
// the resolver walked the cgroup tree since the last sync: first every
// cgroup root made (workload roots and the cgroups above and beside
// them: as many as root made), then, while the map is at most half full,
// the cgroups users made below delegated ones. A cgroup not in the map
// is charged to its nearest ancestor there (full core), so the second
// set only saves the kernel that walk, and the compat core (which does
// not walk) a wait for its next classification. The caller holds c.mu
// or is New.
func (c *Collector) syncWorkloads() {
	src, ok := c.cfg.Resolver.(workloadSource)
	if !ok || c.objs.CgWorkload == nil {
		return
	}
	all, walks := src.Workloads()
	if walks == c.wl.walks && c.wl.written != nil {
		return
	}
	c.wl.walks = walks
	max := int(c.objs.CgWorkload.MaxEntries())
	want := make(map[uint64]uint64, min(len(all), max))
	for id, w := range all {
		if !w.Delegated && len(want) < max {
			want[id] = w.ID
		}
	}
	for id, w := range all {
		if w.Delegated && len(want) < max/2 {
			want[id] = w.ID
		}
	}
	if c.wl.written == nil {
		c.wl.written = map[uint64]uint64{}
	}
	// Deletions first: a cgroup gone frees room for a new one.
	for id := range c.wl.written {
		if _, ok := want[id]; ok {
			continue
		}
		if err := c.objs.CgWorkload.Delete(id); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
			c.log.Warn("workload_update_failed", "cgroup_id", id, "error", err)
			continue
		}
		delete(c.wl.written, id)
	}
	for id, w := range want {
		if old, ok := c.wl.written[id]; ok && old == w {
			continue
		}
		if err := c.objs.CgWorkload.Put(id, w); err != nil {
			if !c.wl.full {
				c.wl.full = true
				c.log.Warn("workload_map_full", "cgroup_id", id, "entries", max, "error", err,
					"effect", "cgroups left out are charged to their nearest ancestor's workload")
			}
			continue
		}
		c.wl.written[id] = w
	}
}
