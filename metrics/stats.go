package metrics

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/spanwatch/spanwatch/snapshot"
)

// A statFamily is what the exporter calls one of snapshot.StatFields: its
// name (after spanwatch_) and help; known, when set, says whether a
// snapshot has the level at all (a gauge keeps its last value when not).
type statFamily struct {
	name, help string
	known      func(*snapshot.Stats) bool
}

func capacityKnown(s *snapshot.Stats) bool { return s.SeriesCapacity > 0 }

// statFamilies are the exporter's families of the snapshot's stats, by
// their JSON names (snapshot.StatFields): a counter for each count over
// the window, a gauge for each level. TestStatFamilies checks that every
// stat has one.
var statFamilies = map[string]statFamily{
	"events":                  {name: "events_total", help: "Span events the BPF programs aggregated."},
	"ringbuf_drops":           {name: "ringbuf_drops_total", help: "Overrun records lost because the ring buffer was full."},
	"stats_full":              {name: "stats_map_full_total", help: "Values not aggregated because the kernel had no room for a new series."},
	"histogram_full":          {name: "histogram_full_total", help: "Values counted in their series but left out of its histogram: no free histogram cell."},
	"names_truncated":         {name: "span_names_truncated_total", help: "Span names cut to 127 bytes, on a UTF-8 character boundary."},
	"quota_other":             {name: "series_quota_overflow_total", help: "Values counted in a workload's (other) series because it held its series quota (per workload: a pod, a container, a systemd unit, or a delegated cgroup with every cgroup below it)."},
	"names_full":              {name: "names_full_total", help: "New series whose name did not fit in the kernel's names map."},
	"extremes_dropped":        {name: "extremes_dropped_total", help: "Updates of a series' min or max the kernel gave up after losing their compare-and-swap race 8 times: that window's min or max may miss the value (its count, sum and histogram have it)."},
	"symbolizer_bytes":        {name: "symbolizer_bytes", help: "Memory the symbolizer's tables, perf maps and lookup caches take."},
	"recursion_misses":        {name: "recursion_misses_total", help: "Program runs the kernel skipped because a BPF program was already running on the CPU: spans lost."},
	"series_live":             {name: "series_live", help: "Series the kernel holds now.", known: capacityKnown},
	"series_capacity":         {name: "series_capacity", help: "Series (name, cgroup, labels) the kernel can hold; it does not depend on the CPU count.", known: capacityKnown},
	"bpf_map_bytes":           {name: "bpf_map_bytes", help: "Memory the aggregation core's BPF maps take now (fdinfo's memlock from Linux 6.4, else at least the maps' estimated size: docs/memory.md).", known: func(s *snapshot.Stats) bool { return s.BPFMapBytes > 0 }},
	"short_events":            {name: "short_events_total", help: "Span event payloads shorter than struct span_event."},
	"read_errors":             {name: "read_errors_total", help: "Payloads or probe arguments the BPF programs could not read: spans lost."},
	"overruns_dropped":        {name: "overruns_dropped_total", help: "Overrun records read but not kept for lack of room."},
	"overruns_queue_dropped":  {name: "overruns_queue_dropped_total", help: "Overrun records read from the ring buffer but dropped: the queue to the worker that symbolizes and delivers them was full."},
	"early_samples_discarded": {name: "early_samples_discarded_total", help: "In-span samples of spans sampled from their start (a budget's sample_from_start) that ended within their budgets: discarded by design, not lost (the span was not slow)."},
}

// A statMetric exports one of snapshot.StatFields.
type statMetric struct {
	field   snapshot.StatField
	known   func(*snapshot.Stats) bool
	counter prometheus.Counter // a count over the window
	gauge   prometheus.Gauge   // a level
}

// newStatMetrics makes the exporter's metric of each stat.
func newStatMetrics() ([]statMetric, error) {
	out := make([]statMetric, len(snapshot.StatFields))
	for i, f := range snapshot.StatFields {
		fam, ok := statFamilies[f.Name]
		if !ok {
			return nil, fmt.Errorf("stat %s: no metric family", f.Name)
		}
		out[i] = statMetric{field: f, known: fam.known}
		if f.Level {
			out[i].gauge = prometheus.NewGauge(prometheus.GaugeOpts{Name: "spanwatch_" + fam.name, Help: fam.help})
		} else {
			out[i].counter = prometheus.NewCounter(prometheus.CounterOpts{Name: "spanwatch_" + fam.name, Help: fam.help})
		}
	}
	return out, nil
}

func (m *statMetric) collector() prometheus.Collector {
	if m.gauge != nil {
		return m.gauge
	}
	return m.counter
}

// observe adds a snapshot's count to the counter, or sets the gauge to
// its level where the snapshot has it.
func (m *statMetric) observe(s *snapshot.Stats) {
	v := float64(m.field.Get(s))
	switch {
	case m.counter != nil:
		m.counter.Add(v)
	case m.known == nil || m.known(s):
		m.gauge.Set(v)
	}
}
