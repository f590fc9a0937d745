//go:build linux

package collector

import (
	"reflect"
	"slices"
	"strings"
	"sync"

	"github.com/cilium/ebpf"

	"github.com/spanwatch/spanwatch/bpf"
	"github.com/spanwatch/spanwatch/internal/inflight"
	"github.com/spanwatch/spanwatch/internal/symbolize"
	"github.com/spanwatch/spanwatch/snapshot"
	"github.com/spanwatch/spanwatch/source"
)

// SourceCore returns what the collector lends its span sources (package
// source): the core's maps and the services a source calls. Sources
// attach with it, and are closed before the collector.
func (c *Collector) SourceCore() *source.Core {
	return &source.Core{
		Logger:           c.log,
		Maps:             c.Maps(),
		Kernel:           c.facts,
		TracepointMethod: c.objs.method,
		ProcRoot:         c.cfg.ProcRoot,
		ScanInterval:     c.cfg.ScanInterval,
		NoUprobeMulti:    c.cfg.NoUprobeMulti,
		Programs: source.Programs{Marker: c.objs.UprobeMarker, MarkerSysV: c.objs.UprobeMarkerSysV, UprobeMulti: c.objs.uprobeMulti,
			Tracepoint: c.objs.tp, WatchedEvents: c.objs.WatchedEvents},
		AllocLabelSet: func(names []string, signed []bool) (uint16, error) {
			return c.AllocLabelSet(LabelSet{Names: names, Signed: signed})
		},
		AllocStringLabelSet: func(names []string, signed []bool, str func(int, uint64) (string, bool)) (uint16, error) {
			return c.AllocLabelSet(LabelSet{Names: names, Signed: signed, String: str})
		},
		FreeLabelSet:    c.FreeLabelSet,
		AddNameResolver: func(f func(string) (string, bool)) { c.AddNameResolver(f) },
		AddAnchor:       func(an symbolize.Anchor) { addAnchor(c.cfg, an) },
		RemoveAnchor:    func(dev, ino uint64) { removeAnchor(c.cfg, dev, ino) },
		WatchInflight:   c.watchInflight,
		AddCounts:       c.addCounts,
		AddHealth:       c.addHealth,
	}
}

// coreMaps names the maps of the core's object that bpf/aggregate.h
// defines (bpf.CoreMaps, the one list of them), by their tags in the
// generated struct.
func coreMaps(o *bpf.SpanwatchMaps) map[string]*ebpf.Map {
	out := map[string]*ebpf.Map{}
	v := reflect.ValueOf(o).Elem()
	for i := range v.NumField() {
		name, _, _ := strings.Cut(v.Type().Field(i).Tag.Get("ebpf"), ",")
		if m, ok := v.Field(i).Interface().(*ebpf.Map); ok && slices.Contains(bpf.CoreMaps, name) {
			out[name] = m
		}
	}
	return out
}

// A counter is one source's health counters (source.Core.AddCounts).
type counter struct {
	counts func() (map[string]uint64, error)
}

// addCounts makes snapshots carry the window's increase of a source's
// counters (sourceEvents).
func (c *Collector) addCounts(f func() (map[string]uint64, error)) func() {
	return register(&c.mu, &c.counters, &counter{counts: f})
}

// register appends x to *list under mu and returns what removes it.
func register[T any](mu *sync.Mutex, list *[]*T, x *T) func() {
	mu.Lock()
	*list = append(*list, x)
	mu.Unlock()
	return func() {
		mu.Lock()
		*list = slices.DeleteFunc(*list, func(y *T) bool { return y == x })
		mu.Unlock()
	}
}

// sourceEvents adds the window's counts of the attached sources (events
// by how they ended, label values keyed "other") to st. c.mu is held.
func (c *Collector) sourceEvents(st *snapshot.Stats) {
	total := map[string]uint64{}
	for _, k := range c.counters {
		n, err := k.counts()
		if err != nil {
			c.log.Warn("source_counts_failed", "error", err)
			continue
		}
		for k, v := range n {
			total[k] += v
		}
	}
	for k, v := range total {
		if d := v - c.prevSource[k]; d > 0 && !strings.HasSuffix(k, "/ok") {
			if st.SourceEvents == nil {
				st.SourceEvents = map[string]uint64{}
			}
			st.SourceEvents[k] = d
		}
	}
	c.prevSource = total
}

// watchInflight has the in-flight sampler watch the spans of a source's
// object too (a USDT tracer's maps).
func (c *Collector) watchInflight(m source.InflightMaps) error {
	if c.inflight == nil {
		return nil
	}
	return c.inflight.w.AddUSDT(inflight.USDTMaps{Inflight: m.Inflight, Sources: m.Sources, TaskStart: m.TaskStart, TaskNames: m.TaskNames})
}

// A health is one source's probe hits (source.Core.AddHealth).
type health struct {
	f func() ([]source.Health, error)
}

// healthKey is one source of a health: its place in what f returns.
type healthKey struct {
	h *health
	i int
}

// addHealth makes snapshots carry each of a source's configured sources'
// hits over the window (sourceHealth).
func (c *Collector) addHealth(f func() ([]source.Health, error)) func() {
	return register(&c.mu, &c.healths, &health{f: f})
}

// sourceHealth puts in st each configured source's probe hits over the
// window (the increase of its total since the last snapshot) and whether
// it is silent. c.mu is held.
func (c *Collector) sourceHealth(st *snapshot.Stats) {
	prev := c.prevHits
	c.prevHits = map[healthKey]source.Health{}
	delta := func(now, before uint64) uint64 {
		if now < before {
			return now
		}
		return now - before
	}
	for _, h := range c.healths {
		hs, err := h.f()
		if err != nil {
			c.log.Warn("source_health_failed", "error", err)
			continue
		}
		for i, x := range hs {
			k := healthKey{h, i}
			c.prevHits[k] = x
			p := prev[k]
			st.Sources = append(st.Sources, snapshot.SourceHealth{
				Source: x.Kind, Name: x.Name, Declared: x.Declared, Sites: x.Sites,
				Hits: delta(x.Hits, p.Hits), Unpaired: delta(x.Unpaired, p.Unpaired), NestOverflow: delta(x.NestOverflow, p.NestOverflow),
				Silent: x.Silent, Hint: x.Hint,
			})
		}
	}
}

// UserEventsCPUGaps reports how many times a CPU was found without live
// perf events on the spanwatch_span tracepoint (sdkevent.Source.CPUGaps).
func (c *Collector) UserEventsCPUGaps() uint64 {
	if c.ue == nil {
		return 0
	}
	return c.ue.CPUGaps()
}
