//go:build linux

package collector

import (
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cilium/ebpf"

	"github.com/spanwatch/spanwatch/internal/cgroup"
	"github.com/spanwatch/spanwatch/internal/kernel"
	"github.com/spanwatch/spanwatch/snapshot"
)

// Series are kept per process in the cgroups that run more than one
// executable (docs/series.md, "One cgroup, several processes"): a plain
// host's login session, a systemd unit running a script and its
// children. There the kernel puts the process's tgid in a series' key
// (bpf/aggregate.h, split_process) and the collector names each such
// series after its process. Cgroups that run one executable (most
// containers and services) are not split: their series, and what a span
// costs there, stay as they were.

// splits mirrors into cg_split the cgroups whose series are kept per
// process, and names their processes.
type splits struct {
	written map[uint64]time.Time // what cg_split holds: when each last had series, or was seen run several executables
	full    bool                 // a write found it full (logged once)

	mu    sync.Mutex // the overrun reader names processes too
	procs map[uint32]procName
}

// procName is what a tgid was last read to be.
type procName struct {
	name, service string
	at            time.Time
}

// procNameTTL is how long a process's name is kept before it is read
// again: a tgid can be reused by another process once its first exited.
const procNameTTL = 30 * time.Second

// process returns the executable name and declared service of process
// tgid, read under procRoot and cached: a process that exited keeps the
// name it was last read with, until no series holds its tgid. One that
// exited before it was read (a worker forked for one request) is named
// by the comm the kernel kept in comms (split_comms) when it made the
// process's first series: the thread's name, at most 15 bytes.
func (sp *splits) process(procRoot string, comms *ebpf.Map, tgid uint32, now time.Time) (name, service string) {
	sp.mu.Lock()
	defer sp.mu.Unlock()
	p, ok := sp.procs[tgid]
	if ok && now.Sub(p.at) < procNameTTL {
		return p.name, p.service
	}
	if n, svc := cgroup.Process(procRoot, tgid); n != "" {
		p = procName{name: n, service: svc}
	} else if p.name == "" && comms != nil {
		var comm [16]byte
		if comms.Lookup(tgid, &comm) == nil {
			p.name = cgroup.CommName(comm[:])
		}
	}
	p.at = now
	if sp.procs == nil {
		sp.procs = map[uint32]procName{}
	}
	sp.procs[tgid] = p
	return p.name, p.service
}

// forget drops the names of processes no live series holds, here and
// in comms.
func (sp *splits) forget(live map[uint32]bool, comms *ebpf.Map) {
	sp.mu.Lock()
	defer sp.mu.Unlock()
	for tgid := range sp.procs {
		if !live[tgid] {
			delete(sp.procs, tgid)
			if comms != nil {
				comms.Delete(tgid)
			}
		}
	}
}

// A severalSource tells which cgroups run more than one executable now
// (*cgroup.Resolver does): New marks them split before any span, so that
// a restarted agent keeps their series as the last one did.
type severalSource interface {
	SeveralExecutables() []uint64
}

// markSplits marks the cgroups that run more than one executable when
// the collector starts. The caller is New.
func (c *Collector) markSplits() {
	src, ok := c.cfg.Resolver.(severalSource)
	if !ok {
		return
	}
	ids := src.SeveralExecutables()
	resolved := make(map[uint64]cgroup.Info, len(ids))
	for _, id := range ids {
		resolved[id] = cgroup.Info{Several: true}
	}
	c.syncSplits(nil, resolved, time.Now())
}

// syncSplits marks in cg_split the cgroups in resolved (resolved in this
// snapshot, or found at start) that run more than one executable, and
// unmarks the marked ones that had no live series for IdleEvict (their
// series were evicted: the cgroup is gone or quiet). A cgroup stays split
// while it has series, even should it come to run one executable again,
// so that its series do not change keys back and forth.
// core_state.split_cgroups says how many are marked: while it is 0 no
// span looks cg_split up. s is nil at start. The caller holds c.mu, or is
// New.
func (c *Collector) syncSplits(s *snapshot.Snapshot, resolved map[uint64]cgroup.Info, now time.Time) {
	m := c.objs.CgSplit
	// The compat core keeps no process in its keys (bpf/aggregate.h
	// split_process): a cgroup of several executables keeps one series
	// a name there, with no process label, as before.
	if m == nil || c.reader == nil || c.facts.Core == kernel.CoreCompat {
		return
	}
	sp := &c.splits
	if sp.written == nil {
		sp.written = map[uint64]time.Time{}
	}
	changed := false
	if len(sp.written) > 0 && s != nil {
		for i := range s.Series {
			if _, ok := sp.written[s.Series[i].CgroupID]; ok {
				sp.written[s.Series[i].CgroupID] = now
			}
		}
		for id, last := range sp.written {
			if now.Sub(last) < c.cfg.IdleEvict {
				continue
			}
			if err := m.Delete(id); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
				c.log.Warn("split_update_failed", "cgroup_id", id, "error", err)
				continue
			}
			delete(sp.written, id)
			changed = true
		}
	}
	for id, info := range resolved {
		if !info.Several {
			continue
		}
		if _, ok := sp.written[id]; ok {
			sp.written[id] = now
			continue
		}
		if err := m.Put(id, uint8(1)); err != nil {
			if !sp.full {
				sp.full = true
				c.log.Warn("split_map_full", "cgroup_id", id, "cgroup", info.Path, "entries", m.MaxEntries(), "error", err,
					"effect", "the series of cgroups left out have no process label")
			}
			continue
		}
		sp.written[id] = now
		changed = true
		c.log.Debug("cgroup_split", "cgroup_id", id, "cgroup", info.Path)
	}
	if changed {
		atomic.StoreUint32(&c.reader.core.SplitCgroups, uint32(len(sp.written)))
	}
}

// mergeSplit merges the series of split cgroups (those the kernel kept
// per process: build gave them their process's names) that have the same
// identity once the cgroup's was given to the rest: processes of one
// executable in one cgroup (a pool of workers, a restarted service) are
// one series, as everywhere else, and a process whose name could not be
// read (it exited before its first read) is counted in the cgroup's own
// series of the name. Then no two series export the same labels.
func (c *Collector) mergeSplit(s *snapshot.Snapshot) {
	r := c.reader
	c.splits.forget(r.liveTgids, c.objs.SplitComms)
	if len(r.splitCgroups) == 0 {
		return
	}
	s.Series = mergeSeries(s.Series, time.Duration(s.WindowNs), func(sr *snapshot.Series) bool { return r.splitCgroups[sr.CgroupID] })
}
