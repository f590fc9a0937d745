package metrics

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net"
	"net/http"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/prometheus/common/model"

	"github.com/spanwatch/spanwatch/internal/buildinfo"
	"github.com/spanwatch/spanwatch/snapshot"
)

// DefaultAddr is where the metrics endpoint listens unless told otherwise:
// loopback only, port 9464.
const DefaultAddr = "127.0.0.1:9464"

// DefaultSeriesTTL is how long a span series that stopped appearing in
// snapshots stays exported.
const DefaultSeriesTTL = time.Hour

// seriesLabels are the labels of every per-span metric, in order: the
// span, then the names people know (Kubernetes namespace, pod, container;
// the executable; the systemd unit), then the cgroup path, which tells
// apart what the names do not. The ids (container_id, pod_uid) are left
// out: the cgroup path holds them, and they change at every restart.
var seriesLabels = []string{"span", "namespace", "pod", "container", "process", "unit", "cgroup"}

// Config configures an Exporter.
type Config struct {
	// Bounds are the classic histogram's bucket upper bounds (le), each
	// moved to the nearest bucket boundary of spanwatch's histogram (see
	// SnapBound), so the exported counts are exact. nil means
	// DefaultBounds; an empty, non-nil slice exports no classic buckets
	// (native histograms and _count and _sum only).
	Bounds []time.Duration
	// NoNativeHistograms leaves the native histograms out of the
	// protobuf form, so every scraper gets the classic buckets only.
	NoNativeHistograms bool
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

// DefaultBounds returns one classic bucket bound per power of two seconds
// from 2^-20 s (954 ns) to 2^7 s (128 s): 28 buckets plus +Inf, each a
// boundary of spanwatch's histogram.
func DefaultBounds() []time.Duration {
	b := make([]time.Duration, 0, 28)
	for e := -20; e <= 7; e++ {
		b = append(b, time.Duration(math.Ldexp(1e9, e)))
	}
	return b
}

// An Exporter turns snapshots into Prometheus metrics. It is safe for
// concurrent use: Observe runs in the collection loop while scrapes read.
type Exporter struct {
	classic *classicBounds
	native  bool
	ttl     time.Duration
	reg     *prometheus.Registry
	log     *slog.Logger

	mu     sync.Mutex
	keyBuf []byte // Observe's scratch for series keys
	series map[string]*seriesState
	descs  map[string]*seriesDescs // by the source label names, joined

	events, ringbufDrops, statsFull, shortEvents, overruns, overrunsDropped, overrunsQueueDropped, snapshots prometheus.Counter
	readErrors, histogramFull, namesTruncated, quotaOther, namesFull, recursionMisses                        prometheus.Counter
	seriesGauge, lastSnapshot, seriesCapacity, seriesLive, mapBytes                                          prometheus.Gauge
	readDuration, evalDuration                                                                               prometheus.Histogram
	ruleErrors                                                                                               *prometheus.CounterVec
	sourceEvents                                                                                             *prometheus.CounterVec
	userFiles                                                                                                *prometheus.CounterVec
	symbolizerBytes                                                                                          prometheus.Gauge
}

// seriesDescs are the per-span metrics' descriptions for one set of label
// names.
type seriesDescs struct {
	spans, errors, overBudget, duration, budget, max *prometheus.Desc
	values                                           *prometheus.Desc // argument metrics
}

type seriesState struct {
	descs      *seriesDescs
	labels     []string
	count      uint64
	errors     uint64
	overBudget uint64
	sumNs      uint64
	budgetNs   uint64
	maxNs      uint64
	// zero and hist are the cumulative histogram: spans of 0 ns, and the
	// schema-6 buckets, sorted. Observe adds to hist in place; a scrape
	// copies it under the lock.
	zero     uint64
	hist     []snapshot.Bucket
	created  time.Time
	lastSeen time.Time
	// An argument metric (a series of Kind "metric"): its values' signed
	// sum and the negative buckets, sorted by index (of |v|).
	metric bool
	sumVal int64
	neg    []snapshot.Bucket
}

// NewExporter returns an Exporter with its collectors registered.
func NewExporter(cfg Config) (*Exporter, error) {
	e := &Exporter{
		native: !cfg.NoNativeHistograms,
		ttl:    cfg.SeriesTTL,
		reg:    cfg.Registry,
		log:    cfg.Logger,
		series: map[string]*seriesState{},
		descs:  map[string]*seriesDescs{},
	}
	bounds := cfg.Bounds
	if bounds == nil {
		bounds = DefaultBounds()
	}
	for i, b := range bounds {
		if b <= 0 {
			return nil, fmt.Errorf("metrics bounds: %v: bounds must be positive", b)
		}
		if i > 0 && b <= bounds[i-1] {
			return nil, fmt.Errorf("metrics bounds: %v after %v: bounds must increase", b, bounds[i-1])
		}
	}
	if len(bounds) > 0 {
		c := snapBounds(bounds)
		e.classic = &c
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
	e.overrunsQueueDropped = c("overruns_queue_dropped_total", "Overrun records read from the ring buffer but dropped: the queue to the worker that symbolizes and delivers them was full.")
	e.snapshots = c("snapshots_total", "Snapshots observed.")
	e.seriesGauge = prometheus.NewGauge(prometheus.GaugeOpts{Name: "spanwatch_series", Help: "Span series exported."})
	e.lastSnapshot = prometheus.NewGauge(prometheus.GaugeOpts{Name: "spanwatch_last_snapshot_timestamp_seconds", Help: "End of the last snapshot's window, Unix time."})
	e.seriesCapacity = prometheus.NewGauge(prometheus.GaugeOpts{Name: "spanwatch_series_capacity", Help: "Series (name, cgroup, labels) the kernel can hold; it does not depend on the CPU count."})
	e.seriesLive = prometheus.NewGauge(prometheus.GaugeOpts{Name: "spanwatch_series_live", Help: "Series the kernel holds now."})
	e.mapBytes = prometheus.NewGauge(prometheus.GaugeOpts{Name: "spanwatch_bpf_map_bytes", Help: "Memory the aggregation core's BPF maps take (the kernel's memlock accounting)."})
	durBuckets := prometheus.ExponentialBuckets(0.0001, 4, 10) // 100 µs .. 26 s
	e.readDuration = prometheus.NewHistogram(prometheus.HistogramOpts{Name: "spanwatch_snapshot_read_duration_seconds", Help: "Time taken to read the BPF maps into a snapshot.", Buckets: durBuckets})
	e.evalDuration = prometheus.NewHistogram(prometheus.HistogramOpts{Name: "spanwatch_evaluation_duration_seconds", Help: "Time taken to evaluate all rules and policies over a snapshot.", Buckets: durBuckets})
	e.sourceEvents = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "spanwatch_source_events_total",
		Help: "Events of user_events and EventHeader sources that did not become a value as they should have (short, bad_loc, unpaired_end, refused EventHeader fields...), and label values keyed other, by source and reason."},
		[]string{"source", "reason"})
	e.userFiles = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "spanwatch_user_file_limits_total",
		Help: "Files users control (binaries, debug files, perf maps, their processes' /proc files) refused or read only in part, by reason: symlink, not_regular, owner, access, too_large, timeout, busy, and the parsing caps (section_size, decompressed_size, symbols, line_rows, module_memory, memory, perf_map_size, ...)."},
		[]string{"reason"})
	e.symbolizerBytes = prometheus.NewGauge(prometheus.GaugeOpts{Name: "spanwatch_symbolizer_bytes", Help: "Memory the symbolizer's tables, perf maps and lookup caches take."})
	e.ruleErrors = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "spanwatch_rule_errors_total", Help: "Rule or policy evaluations that failed."}, []string{"rule"})
	bi := buildinfo.Get()
	buildInfo := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name:        "spanwatch_build_info",
		Help:        "Always 1; the labels say which spanwatch runs (internal/buildinfo).",
		ConstLabels: prometheus.Labels{"version": bi.Version, "revision": bi.Revision, "goversion": bi.GoVersion},
	}, func() float64 { return 1 })

	for _, col := range []prometheus.Collector{
		(*spanCollector)(e),
		e.events, e.ringbufDrops, e.statsFull, e.shortEvents, e.overruns, e.overrunsDropped, e.overrunsQueueDropped, e.snapshots,
		e.readErrors, e.histogramFull, e.namesTruncated, e.quotaOther, e.namesFull, e.recursionMisses,
		e.seriesGauge, e.lastSnapshot, e.seriesCapacity, e.seriesLive, e.mapBytes, e.readDuration, e.evalDuration, e.ruleErrors, e.sourceEvents,
		e.userFiles, e.symbolizerBytes, buildInfo,
	} {
		if err := e.reg.Register(col); err != nil {
			return nil, fmt.Errorf("register metrics: %w", err)
		}
	}
	return e, nil
}

// descsFor returns the per-span descriptions for series with the given
// extra (source) label names, sorted. e.mu is held, or e is being built.
func (e *Exporter) descsFor(extra []string) *seriesDescs {
	key := strings.Join(extra, ",")
	if d := e.descs[key]; d != nil {
		return d
	}
	labels := append(append([]string{}, seriesLabels...), extra...)
	d := func(name, help string) *prometheus.Desc {
		return prometheus.NewDesc("spanwatch_"+name, help, labels, nil)
	}
	sd := &seriesDescs{
		spans:      d("spans_total", "Spans that ended, per span name and cgroup."),
		errors:     d("span_errors_total", "Spans that ended with an error status."),
		overBudget: d("span_over_budget_total", "Spans slower than their budget."),
		duration: d("span_duration_seconds", "Span durations: a native histogram of schema 6 (exactly spanwatch's buckets) "+
			"to scrapers that negotiate protobuf, and classic buckets whose le are boundaries of those buckets, so every count is exact."),
		budget: d("span_budget_seconds", "The span's budget, when one is set."),
		max:    d("span_max_duration_seconds", "The longest span seen since the series began."),
		values: d("metric_values", "Argument metrics (metric: in a source; the span label names the metric): the values' count, "+
			"signed sum and, to scrapers that negotiate protobuf, a native histogram of schema 6 with negative buckets, exactly spanwatch's."),
	}
	e.descs[key] = sd
	return sd
}

// sourceLabelNames returns a series' source label names that can be
// exported, sorted: valid Prometheus label names that are not one of
// seriesLabels.
func sourceLabelNames(l map[string]string) []string {
	if len(l) == 0 {
		return nil
	}
	names := make([]string, 0, len(l))
	for k := range l {
		if model.LabelName(k).IsValidLegacy() && !slices.Contains(seriesLabels, k) && !strings.HasPrefix(k, "__") {
			names = append(names, k)
		}
	}
	sort.Strings(names)
	return names
}

// Observe adds one snapshot's deltas to the cumulative metrics. Argument
// metrics (series of Kind "metric") go to spanwatch_metric_values.
func (e *Exporter) Observe(s *snapshot.Snapshot) {
	e.mu.Lock()
	defer e.mu.Unlock()
	now := s.Time
	if now.IsZero() {
		now = time.Now()
	}
	key := e.keyBuf[:0]
	for i := range s.Series {
		sr := &s.Series[i]
		var extra []string
		if len(sr.SourceLabels) > 0 {
			extra = sourceLabelNames(sr.SourceLabels)
		}
		key = key[:0]
		if sr.IsMetric() {
			key = append(key, 'm', 0) // apart from a span of the same name
		}
		// Label values must be UTF-8 (a scrape of an invalid one fails
		// as a whole); series whose names differ only in bytes that are
		// not are one exported series.
		for _, v := range [...]string{sr.Span, sr.Namespace, sr.Pod, sr.Container, sr.Process, sr.Unit, sr.Cgroup} {
			key = append(append(key, valid(v)...), 0)
		}
		for _, k := range extra {
			key = append(append(append(append(key, k...), 1), valid(sr.SourceLabels[k])...), 0)
		}
		st := e.series[string(key)] // no allocation: the compiler converts in place
		if st == nil {
			values := []string{valid(sr.Span), valid(sr.Namespace), valid(sr.Pod), valid(sr.Container), valid(sr.Process), valid(sr.Unit), valid(sr.Cgroup)}
			for _, k := range extra {
				values = append(values, valid(sr.SourceLabels[k]))
			}
			st = &seriesState{descs: e.descsFor(extra), labels: values, created: now, metric: sr.IsMetric()}
			e.series[string(key)] = st
		}
		if st.metric {
			st.count += sr.Count
			st.sumVal += sr.Sum
			st.lastSeen = now
			var pos, neg []snapshot.Bucket
			for _, b := range sr.Histogram {
				switch {
				case b.Zero:
					st.zero += b.Count
				case b.Negative:
					neg = append(neg, b)
				default:
					pos = append(pos, b)
				}
			}
			slices.SortFunc(neg, func(a, b snapshot.Bucket) int { return cmp.Compare(a.Index, b.Index) })
			st.hist = addHistogram(st.hist, pos)
			st.neg = addHistogram(st.neg, neg)
			continue
		}
		st.count += sr.Count
		st.errors += sr.Errors
		st.overBudget += sr.OverBudget
		st.sumNs += sr.SumNs
		st.budgetNs = sr.BudgetNs
		st.maxNs = max(st.maxNs, sr.MaxNs)
		st.lastSeen = now
		positive := sr.Histogram
		if len(positive) > 0 && positive[0].Zero {
			st.zero += positive[0].Count
			positive = positive[1:]
		}
		st.hist = addHistogram(st.hist, positive)
	}
	e.keyBuf = key
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
	for k, v := range s.Stats.SourceEvents {
		src, reason, _ := strings.Cut(k, "/")
		e.sourceEvents.WithLabelValues(src, reason).Add(float64(v))
	}
	for reason, v := range s.Stats.UserFiles {
		e.userFiles.WithLabelValues(reason).Add(float64(v))
	}
	e.symbolizerBytes.Set(float64(s.Stats.SymbolizerBytes))
	if s.Stats.SeriesCapacity > 0 {
		e.seriesCapacity.Set(float64(s.Stats.SeriesCapacity))
		e.seriesLive.Set(float64(s.Stats.SeriesLive))
	}
	if s.Stats.BPFMapBytes > 0 {
		e.mapBytes.Set(float64(s.Stats.BPFMapBytes))
	}
	e.overruns.Add(float64(len(s.Overruns)))
	e.overrunsDropped.Add(float64(s.Stats.OverrunsDropped))
	e.overrunsQueueDropped.Add(float64(s.Stats.OverrunsQueueDropped))
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

// Describe describes nothing: the collector is unchecked, since series
// with source labels bring label names (and so descriptions) that appear
// only as snapshots arrive.
func (c *spanCollector) Describe(chan<- *prometheus.Desc) {}

func (c *spanCollector) Collect(ch chan<- prometheus.Metric) {
	e := (*Exporter)(c)
	// Copy the state under the lock and build the metrics outside it, so
	// a scrape of many series does not hold up Observe.
	e.mu.Lock()
	states := make([]seriesState, 0, len(e.series))
	n := 0
	for _, st := range e.series {
		n += len(st.hist) + len(st.neg)
	}
	buckets := make([]snapshot.Bucket, 0, n)
	for _, st := range e.series {
		cp := *st
		k := len(buckets)
		buckets = append(buckets, st.hist...)
		cp.hist = buckets[k:len(buckets):len(buckets)]
		k = len(buckets)
		buckets = append(buckets, st.neg...)
		cp.neg = buckets[k:len(buckets):len(buckets)]
		states = append(states, cp)
	}
	e.mu.Unlock()

	for i := range states {
		st := &states[i]
		d := st.descs
		if st.metric {
			total := st.zero
			for _, b := range st.hist {
				total += b.Count
			}
			for _, b := range st.neg {
				total += b.Count
			}
			ch <- &durationHistogram{
				desc: d.values, labels: prometheus.MakeLabelPairs(d.values, st.labels),
				count: total, sumSec: float64(st.sumVal), zero: st.zero, buckets: st.hist, negative: st.neg,
				native: e.native, created: st.created,
			}
			continue
		}
		ch <- prometheus.MustNewConstMetric(d.spans, prometheus.CounterValue, float64(st.count), st.labels...)
		ch <- prometheus.MustNewConstMetric(d.errors, prometheus.CounterValue, float64(st.errors), st.labels...)
		ch <- prometheus.MustNewConstMetric(d.overBudget, prometheus.CounterValue, float64(st.overBudget), st.labels...)
		ch <- prometheus.MustNewConstMetric(d.max, prometheus.GaugeValue, float64(st.maxNs)/1e9, st.labels...)
		if st.budgetNs > 0 {
			ch <- prometheus.MustNewConstMetric(d.budget, prometheus.GaugeValue, float64(st.budgetNs)/1e9, st.labels...)
		}
		// The count is the histogram's total, so the +Inf bucket and
		// _count agree even if a window's Count and histogram differ.
		total := st.zero
		for _, b := range st.hist {
			total += b.Count
		}
		ch <- &durationHistogram{
			desc: d.duration, labels: prometheus.MakeLabelPairs(d.duration, st.labels),
			count: total, sumSec: float64(st.sumNs) / 1e9, zero: st.zero, buckets: st.hist,
			classic: e.classic, native: e.native, created: st.created,
		}
	}
}

// addHistogram adds src's counts to dst, both sorted, in place when every
// bucket of src is already in dst (a series' usual window), else into a
// new merged slice.
func addHistogram(dst, src []snapshot.Bucket) []snapshot.Bucket {
	j := 0
	for i := range src {
		for j < len(dst) && dst[j].Index < src[i].Index {
			j++
		}
		if j == len(dst) || dst[j].Index != src[i].Index {
			return snapshot.MergeHistogram(dst, src)
		}
	}
	j = 0
	for i := range src {
		for dst[j].Index < src[i].Index {
			j++
		}
		dst[j].Count += src[i].Count
	}
	return dst
}

// valid returns s as valid UTF-8, with U+FFFD for bytes that are not.
func valid(s string) string {
	if utf8.ValidString(s) {
		return s
	}
	return strings.ToValidUTF8(s, "\uFFFD")
}
