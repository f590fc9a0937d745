package metrics

import (
	"context"
	"errors"
	"fmt"
	"hash/maphash"
	"log/slog"
	"math"
	"net"
	"net/http"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
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
// apart what the names do not, the OpenTelemetry service name the
// processes declare, and the ids. The ids change at every restart of a
// container, and a Kubernetes container's cgroup path holds them: unless
// Config.IDs, a series named by Kubernetes (its pod known) goes without
// its cgroup path, and no series has container_id or pod_uid, so a
// restarted container goes on in the same series (builder.labelValues).
var seriesLabels = []string{"span", "namespace", "pod", "container", "process", "unit", "cgroup", "service", "container_id", "pod_uid"}

// Names say what the per-span families and their labels are called.
type Names string

const (
	// NamesSpanwatch: spanwatch_spans_total, spanwatch_span_errors_total
	// and spanwatch_span_duration_seconds, labelled span and process (the
	// default).
	NamesSpanwatch Names = "spanwatch"
	// NamesSpanmetrics: the names the OpenTelemetry Collector's
	// spanmetrics connector gives the same quantities once Prometheus
	// has them, so dashboards and rules written for it work:
	// traces_span_metrics_calls_total with status_code
	// (STATUS_CODE_ERROR for the errors, STATUS_CODE_UNSET for the
	// rest) and traces_span_metrics_duration_seconds, labelled
	// span_name and service_name (the OpenTelemetry service name the
	// processes declare in their environment, else the process). The
	// other families keep their names, with the same labels.
	NamesSpanmetrics Names = "spanmetrics"
)

// spanmetricsLabels are the label names NamesSpanmetrics gives
// seriesLabels' span and service (which then falls back to the process:
// builder.labelValues), and the label it adds.
var spanmetricsLabels = map[string]string{"span": "span_name", "service": "service_name"}

const spanmetricsStatus = "status_code"

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
	// NoExemplars leaves exemplars out: the trace id of each span
	// series' newest overrun on its latency histogram (exemplar.go),
	// which OpenMetrics and protobuf scrapes carry otherwise.
	NoExemplars bool
	// Names chooses the per-span families' names and labels: "" or
	// NamesSpanwatch, or NamesSpanmetrics.
	Names Names
	// IDs exports every series' cgroup path and its container_id and
	// pod_uid labels; without it a series whose pod is known goes without
	// the three, which change when its container restarts (a new series
	// each time), and other series keep their cgroup path.
	IDs bool
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
// concurrent use: Observe runs in the collection loop while scrapes read
// the newest view, without a lock.
type Exporter struct {
	// spanmetrics says the per-span families take NamesSpanmetrics.
	spanmetrics bool
	classic     *classicBounds
	native      bool
	// exemplars says the series keep and expose exemplars.
	exemplars bool
	ttl       time.Duration
	reg       *prometheus.Registry
	log       *slog.Logger

	view atomic.Pointer[view] // the newest; never nil

	mu         sync.Mutex // serializes Observe and guards bd
	bd         builder
	dropAbsent atomic.Bool // SetDropAbsent

	// stats export snapshot.StatFields, one metric each.
	stats                                []statMetric
	overruns, snapshots                  prometheus.Counter
	seriesGauge, lastSnapshot            prometheus.Gauge
	readDuration, evalDuration           prometheus.Histogram
	ruleErrors                           *prometheus.CounterVec
	sourceEvents, sourceHits, sourceLost *prometheus.CounterVec
	sourceSilent                         *prometheus.GaugeVec
	userFiles                            *prometheus.CounterVec
}

// NewExporter returns an Exporter with its collectors registered.
func NewExporter(cfg Config) (*Exporter, error) {
	switch cfg.Names {
	case "", NamesSpanwatch:
	case NamesSpanmetrics:
	default:
		return nil, fmt.Errorf("metrics names %q: want %q or %q", cfg.Names, NamesSpanwatch, NamesSpanmetrics)
	}
	e := &Exporter{
		spanmetrics: cfg.Names == NamesSpanmetrics,
		native:      !cfg.NoNativeHistograms,
		exemplars:   !cfg.NoExemplars,
		ttl:         cfg.SeriesTTL,
		reg:         cfg.Registry,
		log:         cfg.Logger,
	}
	e.view.Store(&view{})
	e.bd = builder{seed: maphash.MakeSeed(), index: map[uint64]int32{}, names: map[string][]string{}, reserved: seriesLabels, ids: cfg.IDs}
	if e.spanmetrics {
		// A source label spelled as one of the names the spanmetrics
		// labels take would clash with it: it is not exported.
		e.bd.reserved = append(slices.Clone(seriesLabels), "span_name", "service_name", spanmetricsStatus)
		e.bd.serviceIsProcess = true
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
	e.overruns = c("overruns_total", "Overrun records (slow spans with stacks) received.")
	e.snapshots = c("snapshots_total", "Snapshots observed.")
	e.seriesGauge = prometheus.NewGauge(prometheus.GaugeOpts{Name: "spanwatch_series", Help: "Span series exported."})
	e.lastSnapshot = prometheus.NewGauge(prometheus.GaugeOpts{Name: "spanwatch_last_snapshot_timestamp_seconds", Help: "End of the last snapshot's window, Unix time."})
	durBuckets := prometheus.ExponentialBuckets(0.0001, 4, 10) // 100 µs .. 26 s
	e.readDuration = prometheus.NewHistogram(prometheus.HistogramOpts{Name: "spanwatch_snapshot_read_duration_seconds", Help: "Time taken to read the BPF maps into a snapshot.", Buckets: durBuckets})
	e.evalDuration = prometheus.NewHistogram(prometheus.HistogramOpts{Name: "spanwatch_evaluation_duration_seconds", Help: "Time taken to evaluate all rules and policies over a snapshot.", Buckets: durBuckets})
	e.sourceEvents = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "spanwatch_source_events_total",
		Help: "Events of user_events, EventHeader and USDT sources that did not become a value as they should have (short, bad_loc, unpaired_end, nest_overflow, refused EventHeader fields...), and label values keyed other, by source and reason."},
		[]string{"source", "reason"})
	e.sourceHits = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "spanwatch_source_hits_total",
		Help: "Probe hits (the ends of pairs, single probes) of each configured USDT source, by kind, name and where the configuration declares it: a source that stays at 0 is silent (spanwatch_source_silent)."},
		[]string{"source", "name", "declared"})
	e.sourceLost = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "spanwatch_source_lost_total",
		Help: "Spans each configured USDT source lost, by reason: unpaired_end (an end without an open start), nest_overflow (a start given way to deeper ones on a full thread stack); spanwatch_source_events_total has them summed over sources."},
		[]string{"source", "name", "declared", "reason"})
	e.sourceSilent = prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "spanwatch_source_silent",
		Help: "1 for a configured source attached its silent_after ago (default 10m) and never hit since: a runtime whose probes need a switch to fire (the log's source_silent names it; docs/sources.md, \"Silent sources\"); else 0."},
		[]string{"source", "name", "declared"})
	e.userFiles = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "spanwatch_user_file_limits_total",
		Help: "Files users control (binaries, debug files, perf maps, their processes' /proc files) refused or read only in part, by reason: symlink, not_regular, owner, access, too_large, timeout, busy, and the parsing caps (section_size, decompressed_size, symbols, line_rows, module_memory, memory, perf_map_size, ...)."},
		[]string{"reason"})
	e.ruleErrors = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "spanwatch_rule_errors_total", Help: "Rule or policy evaluations that failed."}, []string{"rule"})
	bi := buildinfo.Get()
	buildInfo := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name:        "spanwatch_build_info",
		Help:        "Always 1; the labels say which spanwatch runs (internal/buildinfo).",
		ConstLabels: prometheus.Labels{"version": bi.Version, "revision": bi.Revision, "goversion": bi.GoVersion},
	}, func() float64 { return 1 })

	stats, err := newStatMetrics()
	if err != nil {
		return nil, err
	}
	e.stats = stats
	cols := []prometheus.Collector{
		e.overruns, e.snapshots, e.seriesGauge, e.lastSnapshot, e.readDuration, e.evalDuration, e.ruleErrors, e.sourceEvents,
		e.sourceHits, e.sourceLost, e.sourceSilent, e.userFiles, buildInfo,
	}
	for i := range e.stats {
		cols = append(cols, e.stats[i].collector())
	}
	for _, col := range cols {
		if err := e.reg.Register(col); err != nil {
			return nil, fmt.Errorf("register metrics: %w", err)
		}
	}
	return e, nil
}

// sourceLabelNames returns a series' source label names that can be
// exported, sorted: valid Prometheus label names that are not one of the
// exporter's own (seriesLabels, and with NamesSpanmetrics the names its
// labels take).
func (bd *builder) sourceLabelNames(l map[string]string) []string {
	if len(l) == 0 {
		return nil
	}
	names := make([]string, 0, len(l))
	for k := range l {
		if model.LabelName(k).IsValidLegacy() && !slices.Contains(bd.reserved, k) && !strings.HasPrefix(k, "__") {
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
	v := e.build(e.view.Load(), s, now, e.dropAbsent.Load())
	e.view.Store(v)
	e.seriesGauge.Set(float64(len(v.series)))

	for i := range e.stats {
		e.stats[i].observe(&s.Stats)
	}

	for k, v := range s.Stats.SourceEvents {
		src, reason, _ := strings.Cut(k, "/")
		e.sourceEvents.WithLabelValues(src, reason).Add(float64(v))
	}
	e.sourceSilent.Reset()
	for _, h := range s.Stats.Sources {
		e.sourceHits.WithLabelValues(h.Source, h.Name, h.Declared).Add(float64(h.Hits))
		if h.Unpaired > 0 {
			e.sourceLost.WithLabelValues(h.Source, h.Name, h.Declared, "unpaired_end").Add(float64(h.Unpaired))
		}
		if h.NestOverflow > 0 {
			e.sourceLost.WithLabelValues(h.Source, h.Name, h.Declared, "nest_overflow").Add(float64(h.NestOverflow))
		}
		silent := 0.0
		if h.Silent {
			silent = 1
		}
		e.sourceSilent.WithLabelValues(h.Source, h.Name, h.Declared).Set(silent)
	}
	for reason, v := range s.Stats.UserFiles {
		e.userFiles.WithLabelValues(reason).Add(float64(v))
	}
	e.overruns.Add(float64(len(s.Overruns)))
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

// SetDropAbsent makes Observe stop exporting, at once, the series a
// snapshot no longer holds (series the collector evicted from the kernel),
// instead of after the series TTL: what the memory budget sheds under
// pressure (memory.StaleExports).
func (e *Exporter) SetDropAbsent(on bool) { e.dropAbsent.Store(on) }

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

// valid returns s as valid UTF-8, with U+FFFD for bytes that are not.
func valid(s string) string {
	if utf8.ValidString(s) {
		return s
	}
	return strings.ToValidUTF8(s, "\uFFFD")
}
