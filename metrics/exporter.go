package metrics

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sort"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/spanwatch/spanwatch/snapshot"
)

// DefaultAddr is where the metrics endpoint listens unless told otherwise:
// loopback only, port 9464.
const DefaultAddr = "127.0.0.1:9464"

// DefaultSeriesTTL is how long a span series that stopped appearing in
// snapshots stays exported.
const DefaultSeriesTTL = time.Hour

// seriesLabels are the labels of every per-span metric, in order.
var seriesLabels = []string{"span", "cgroup", "container", "pod", "unit"}

// Config configures an Exporter.
type Config struct {
	// Bounds are the histogram bucket upper bounds. Each must be the
	// largest whole nanosecond of a bucket of spanwatch's histogram
	// (snapshot.DurationBounds), so the exported counts are exact; nil
	// means DefaultBounds.
	Bounds []time.Duration
	// SeriesTTL drops a span series that has not appeared in a snapshot
	// for this long; 0 means DefaultSeriesTTL, negative keeps series
	// forever.
	SeriesTTL time.Duration
	// Registry is where the Exporter registers its collectors; nil means
	// a new registry with the Go runtime and process collectors.
	Registry *prometheus.Registry
	// Logger receives HTTP serving errors; nil discards them.
	Logger *slog.Logger
}

// DefaultBounds returns one bucket bound per power of two seconds from
// 2^-20 s (953 ns) to 2^7 s (128 s): 28 buckets plus +Inf. Each is the
// largest whole nanosecond at or below a bound of spanwatch's histogram
// (2^(i/64) s with i a multiple of 64), so the exported counts are exact.
func DefaultBounds() []time.Duration {
	b := make([]time.Duration, 0, 28)
	for e := -20; e <= 7; e++ {
		_, hi := snapshot.DurationBounds(int32(e * snapshot.HistPerOctave))
		b = append(b, time.Duration(hi-1))
	}
	return b
}

// An Exporter turns snapshots into Prometheus metrics. It is safe for
// concurrent use: Observe runs in the collection loop while scrapes read.
type Exporter struct {
	boundsNs []uint64
	les      []float64 // upper bound in seconds of each bound, see leSeconds
	ttl      time.Duration
	reg      *prometheus.Registry
	log      *slog.Logger

	mu     sync.Mutex
	series map[seriesKey]*seriesState

	descSpans, descErrors, descOverBudget, descDuration, descBudget, descMax *prometheus.Desc

	events, ringbufDrops, statsFull, shortEvents, overruns, overrunsDropped, snapshots prometheus.Counter
	readErrors, histogramFull, namesTruncated, quotaOther, namesFull, recursionMisses  prometheus.Counter
	seriesGauge, lastSnapshot, seriesCapacity, seriesLive, mapBytes                    prometheus.Gauge
	readDuration, evalDuration                                                         prometheus.Histogram
	ruleErrors                                                                         *prometheus.CounterVec
}

type seriesKey struct {
	span, cgroup, container, pod, unit string
}

type seriesState struct {
	labels     []string
	count      uint64
	errors     uint64
	overBudget uint64
	sumNs      uint64
	budgetNs   uint64
	maxNs      uint64
	// buckets[i] counts durations in [bounds[i-1], bounds[i]); the last
	// slot counts those at or above the last bound.
	buckets  []uint64
	lastSeen time.Time
}

// NewExporter returns an Exporter with its collectors registered.
func NewExporter(cfg Config) (*Exporter, error) {
	bounds := cfg.Bounds
	if bounds == nil {
		bounds = DefaultBounds()
	}
	e := &Exporter{
		ttl:    cfg.SeriesTTL,
		reg:    cfg.Registry,
		log:    cfg.Logger,
		series: map[seriesKey]*seriesState{},
	}
	var prev uint64
	for _, b := range bounds {
		ns := uint64(b)
		if b <= 0 || ns <= prev {
			return nil, fmt.Errorf("metrics bounds: %v: bounds must be positive and increasing", b)
		}
		if lo, hi := snapshot.DurationBounds(snapshot.DurationIndex(ns)); hi-1 != ns {
			return nil, fmt.Errorf("metrics bounds: %v is not a bucket boundary of spanwatch's histogram; the nearest below is %v", b, time.Duration(lo-1))
		}
		prev = ns
		e.boundsNs = append(e.boundsNs, ns)
		e.les = append(e.les, leSeconds(ns))
	}
	if e.ttl == 0 {
		e.ttl = DefaultSeriesTTL
	}
	if e.log == nil {
		e.log = slog.New(slog.DiscardHandler)
	}
	if e.reg == nil {
		e.reg = prometheus.NewRegistry()
		e.reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	}

	d := func(name, help string) *prometheus.Desc {
		return prometheus.NewDesc("spanwatch_"+name, help, seriesLabels, nil)
	}
	e.descSpans = d("spans_total", "Spans that ended, per span name and cgroup.")
	e.descErrors = d("span_errors_total", "Spans that ended with an error status.")
	e.descOverBudget = d("span_over_budget_total", "Spans slower than their budget.")
	e.descDuration = d("span_duration_seconds", "Span durations. Bucket counts are exact: le is the largest whole nanosecond below a bucket boundary of spanwatch's histogram.")
	e.descBudget = d("span_budget_seconds", "The span's budget, when one is set.")
	e.descMax = d("span_max_duration_seconds", "The longest span seen since the series began.")

	c := func(name, help string) prometheus.Counter {
		return prometheus.NewCounter(prometheus.CounterOpts{Name: "spanwatch_" + name, Help: help})
	}
	e.events = c("events_total", "Span events the BPF programs aggregated.")
	e.ringbufDrops = c("ringbuf_drops_total", "Overrun records lost because the ring buffer was full.")
	e.statsFull = c("stats_map_full_total", "Values not aggregated because the kernel had no room for a new series.")
	e.readErrors = c("read_errors_total", "Payloads or probe arguments the BPF programs could not read: spans lost.")
	e.histogramFull = c("histogram_full_total", "Values counted in their series but left out of its histogram: no free histogram cell.")
	e.namesTruncated = c("span_names_truncated_total", "Span names cut to 127 bytes, on a UTF-8 character boundary.")
	e.quotaOther = c("series_quota_overflow_total", "Values counted in a workload's (other) series because it held its series quota.")
	e.namesFull = c("names_full_total", "New series whose name did not fit in the kernel's names map.")
	e.recursionMisses = c("recursion_misses_total", "Program runs the kernel skipped because a BPF program was already running on the CPU: spans lost.")
	e.shortEvents = c("short_events_total", "Span event payloads shorter than struct span_event.")
	e.overruns = c("overruns_total", "Overrun records (slow spans with stacks) received.")
	e.overrunsDropped = c("overruns_dropped_total", "Overrun records read but not kept for lack of room.")
	e.snapshots = c("snapshots_total", "Snapshots observed.")
	e.seriesGauge = prometheus.NewGauge(prometheus.GaugeOpts{Name: "spanwatch_series", Help: "Span series exported."})
	e.lastSnapshot = prometheus.NewGauge(prometheus.GaugeOpts{Name: "spanwatch_last_snapshot_timestamp_seconds", Help: "End of the last snapshot's window, Unix time."})
	e.seriesCapacity = prometheus.NewGauge(prometheus.GaugeOpts{Name: "spanwatch_series_capacity", Help: "Series (name, cgroup, labels) the kernel can hold; it does not depend on the CPU count."})
	e.seriesLive = prometheus.NewGauge(prometheus.GaugeOpts{Name: "spanwatch_series_live", Help: "Series the kernel holds now."})
	e.mapBytes = prometheus.NewGauge(prometheus.GaugeOpts{Name: "spanwatch_bpf_map_bytes", Help: "Memory the aggregation core's BPF maps take (the kernel's memlock accounting)."})
	durBuckets := prometheus.ExponentialBuckets(0.0001, 4, 10) // 100 µs .. 26 s
	e.readDuration = prometheus.NewHistogram(prometheus.HistogramOpts{Name: "spanwatch_snapshot_read_duration_seconds", Help: "Time taken to read the BPF maps into a snapshot.", Buckets: durBuckets})
	e.evalDuration = prometheus.NewHistogram(prometheus.HistogramOpts{Name: "spanwatch_evaluation_duration_seconds", Help: "Time taken to evaluate all rules and policies over a snapshot.", Buckets: durBuckets})
	e.ruleErrors = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "spanwatch_rule_errors_total", Help: "Rule or policy evaluations that failed."}, []string{"rule"})

	for _, col := range []prometheus.Collector{
		(*spanCollector)(e),
		e.events, e.ringbufDrops, e.statsFull, e.shortEvents, e.overruns, e.overrunsDropped, e.snapshots,
		e.readErrors, e.histogramFull, e.namesTruncated, e.quotaOther, e.namesFull, e.recursionMisses,
		e.seriesGauge, e.lastSnapshot, e.seriesCapacity, e.seriesLive, e.mapBytes, e.readDuration, e.evalDuration, e.ruleErrors,
	} {
		if err := e.reg.Register(col); err != nil {
			return nil, fmt.Errorf("register metrics: %w", err)
		}
	}
	return e, nil
}

// leSeconds is the exported upper bound of a bucket that ends (exclusive)
// at ns: durations are whole nanoseconds, so "below ns" is exactly "at most
// ns-1", which is what Prometheus's le means.
func leSeconds(ns uint64) float64 { return float64(ns-1) / 1e9 }

// Observe adds one snapshot's deltas to the cumulative metrics.
func (e *Exporter) Observe(s *snapshot.Snapshot) {
	e.mu.Lock()
	defer e.mu.Unlock()
	now := s.Time
	if now.IsZero() {
		now = time.Now()
	}
	for i := range s.Series {
		sr := &s.Series[i]
		// Label values must be UTF-8 (a scrape of an invalid one fails
		// as a whole); series whose names differ only in bytes that are
		// not are one exported series.
		k := seriesKey{valid(sr.Span), valid(sr.Cgroup), valid(sr.Container), valid(sr.Pod), valid(sr.Unit)}
		st := e.series[k]
		if st == nil {
			st = &seriesState{
				labels:  []string{k.span, k.cgroup, k.container, k.pod, k.unit},
				buckets: make([]uint64, len(e.boundsNs)+1),
			}
			e.series[k] = st
		}
		st.count += sr.Count
		st.errors += sr.Errors
		st.overBudget += sr.OverBudget
		st.sumNs += sr.SumNs
		st.budgetNs = sr.BudgetNs
		st.maxNs = max(st.maxNs, sr.MaxNs)
		st.lastSeen = now
		for _, b := range sr.Histogram {
			// The first bound at or above the bucket's end: bounds
			// are bucket boundaries, so the bucket lies wholly below
			// it and wholly at or above the bound before it.
			j := sort.Search(len(e.boundsNs), func(j int) bool { return e.boundsNs[j] >= b.High-1 })
			st.buckets[j] += b.Count
		}
	}
	if e.ttl > 0 {
		for k, st := range e.series {
			if now.Sub(st.lastSeen) > e.ttl {
				delete(e.series, k)
			}
		}
	}
	e.seriesGauge.Set(float64(len(e.series)))

	e.events.Add(float64(s.Stats.Events))
	e.ringbufDrops.Add(float64(s.Stats.RingbufDrops))
	e.statsFull.Add(float64(s.Stats.StatsFull))
	e.shortEvents.Add(float64(s.Stats.ShortEvents))
	e.readErrors.Add(float64(s.Stats.ReadErrors))
	e.histogramFull.Add(float64(s.Stats.HistogramFull))
	e.namesTruncated.Add(float64(s.Stats.NamesTruncated))
	e.quotaOther.Add(float64(s.Stats.QuotaOther))
	e.namesFull.Add(float64(s.Stats.NamesFull))
	e.recursionMisses.Add(float64(s.Stats.RecursionMisses))
	if s.Stats.SeriesCapacity > 0 {
		e.seriesCapacity.Set(float64(s.Stats.SeriesCapacity))
		e.seriesLive.Set(float64(s.Stats.SeriesLive))
	}
	if s.Stats.BPFMapBytes > 0 {
		e.mapBytes.Set(float64(s.Stats.BPFMapBytes))
	}
	e.overruns.Add(float64(len(s.Overruns)))
	e.overrunsDropped.Add(float64(s.Stats.OverrunsDropped))
	e.snapshots.Inc()
	e.readDuration.Observe(float64(s.Stats.ReadNs) / 1e9)
	if !s.Time.IsZero() {
		e.lastSnapshot.Set(float64(s.Time.UnixNano()) / 1e9)
	}
}

// ObserveEvaluation records how long one evaluation of the rules and
// policies over a snapshot took.
func (e *Exporter) ObserveEvaluation(d time.Duration) { e.evalDuration.Observe(d.Seconds()) }

// RuleError counts one failed evaluation of the named rule or policy.
func (e *Exporter) RuleError(rule string) { e.ruleErrors.WithLabelValues(rule).Inc() }

// Registry returns the registry the Exporter serves; other packages
// register their own collectors in it.
func (e *Exporter) Registry() *prometheus.Registry { return e.reg }

// Handler returns the /metrics HTTP handler.
func (e *Exporter) Handler() http.Handler {
	return promhttp.HandlerFor(e.reg, promhttp.HandlerOpts{
		ErrorLog:          slog.NewLogLogger(e.log.Handler(), slog.LevelWarn),
		EnableOpenMetrics: true,
	})
}

// Serve serves /metrics on ln until ctx is done, then shuts the server
// down and returns nil.
func (e *Exporter) Serve(ctx context.Context, ln net.Listener) error {
	mux := http.NewServeMux()
	mux.Handle("/metrics", e.Handler())
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return fmt.Errorf("serve metrics on %s: %w", ln.Addr(), err)
	case <-ctx.Done():
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := srv.Shutdown(sctx); err != nil {
			return fmt.Errorf("shut down metrics server: %w", err)
		}
		if err := <-errc; err != nil && !errors.Is(err, http.ErrServerClosed) {
			return fmt.Errorf("serve metrics on %s: %w", ln.Addr(), err)
		}
		return nil
	}
}

// ListenAndServe listens on addr (DefaultAddr when empty) and serves
// /metrics until ctx is done.
func (e *Exporter) ListenAndServe(ctx context.Context, addr string) error {
	if addr == "" {
		addr = DefaultAddr
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("listen for metrics: %w", err)
	}
	return e.Serve(ctx, ln)
}

// spanCollector exposes the per-series state as const metrics at scrape
// time.
type spanCollector Exporter

func (c *spanCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.descSpans, c.descErrors, c.descOverBudget, c.descDuration, c.descBudget, c.descMax} {
		ch <- d
	}
}

func (c *spanCollector) Collect(ch chan<- prometheus.Metric) {
	e := (*Exporter)(c)
	// Copy the state under the lock and build the metrics outside it, so
	// a scrape of many series does not hold up Observe.
	e.mu.Lock()
	states := make([]seriesState, 0, len(e.series))
	counts := make([]uint64, 0, len(e.series)*(len(e.les)+1))
	for _, st := range e.series {
		cp := *st
		n := len(counts)
		counts = append(counts, st.buckets...)
		cp.buckets = counts[n:len(counts):len(counts)]
		states = append(states, cp)
	}
	e.mu.Unlock()

	for i := range states {
		st := &states[i]
		ch <- prometheus.MustNewConstMetric(e.descSpans, prometheus.CounterValue, float64(st.count), st.labels...)
		ch <- prometheus.MustNewConstMetric(e.descErrors, prometheus.CounterValue, float64(st.errors), st.labels...)
		ch <- prometheus.MustNewConstMetric(e.descOverBudget, prometheus.CounterValue, float64(st.overBudget), st.labels...)
		ch <- prometheus.MustNewConstMetric(e.descMax, prometheus.GaugeValue, float64(st.maxNs)/1e9, st.labels...)
		if st.budgetNs > 0 {
			ch <- prometheus.MustNewConstMetric(e.descBudget, prometheus.GaugeValue, float64(st.budgetNs)/1e9, st.labels...)
		}
		buckets := make(map[float64]uint64, len(e.les))
		var cum uint64
		for i, le := range e.les {
			cum += st.buckets[i]
			buckets[le] = cum
		}
		cum += st.buckets[len(e.les)]
		// The count is the histogram's total, so the +Inf bucket and
		// _count agree even if a window's Count and histogram differ.
		ch <- prometheus.MustNewConstHistogram(e.descDuration, cum, float64(st.sumNs)/1e9, buckets, st.labels...)
	}
}

// valid returns s as valid UTF-8, with U+FFFD for bytes that are not.
func valid(s string) string {
	if utf8.ValidString(s) {
		return s
	}
	return strings.ToValidUTF8(s, "\uFFFD")
}
