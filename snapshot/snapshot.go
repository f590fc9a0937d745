package snapshot

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"time"
)

// Version is the version of the JSON form. It changes only when a field
// changes meaning or is removed; new fields keep the version. Version 2
// (schema-6 histograms with exact window extremes) changed the histogram's
// buckets, made max_ns the window's exact maximum (it was the series'
// running maximum, with window_max_ns the window's estimate) and added
// min_ns, metric series and labels; container and pod became the
// Kubernetes names, with the ids in container_id and pod_uid. Decode still
// reads version 1.
const Version = 2

// A Snapshot is what the collector saw over one window: one Series per span
// name and cgroup, the overruns (spans slower than their budget) that arrived
// during the window, and the collector's own counters.
type Snapshot struct {
	Version int `json:"version"`
	// Time is the end of the window.
	Time time.Time `json:"time"`
	// WindowNs is the length of the window in nanoseconds.
	WindowNs int64 `json:"window_ns"`
	// Host is the node the agent runs on.
	Host string `json:"host,omitempty"`
	// Part numbers the lines of a snapshot too long for one line of
	// --output (LineWriter): 1, 2, ... in order; 0 (absent) for a
	// snapshot on one line. Every part has the snapshot's version, time,
	// window and host; its series and then its overruns are spread over
	// the parts in order; the stats are on the last part. More says that
	// more parts follow. A Reader joins the parts.
	Part     int       `json:"part,omitempty"`
	More     bool      `json:"more,omitempty"`
	Series   []Series  `json:"series"`
	Overruns []Overrun `json:"overruns,omitempty"`
	Stats    Stats     `json:"stats"`
}

// Window returns the window length.
func (s *Snapshot) Window() time.Duration { return time.Duration(s.WindowNs) }

// A Series is one span name (or, for Kind "metric", one argument metric) in
// one cgroup, with one set of source labels, over the window. Counts are
// deltas over the window; quantiles come from the window's histogram,
// clamped to the window's exact minimum and maximum, and are 0 (never NaN)
// when the window is empty.
type Series struct {
	// Kind is "" (a span) or "metric" (an argument metric: a value per
	// probe hit, with Sum, Min, Max and quantiles of the values).
	Kind     string `json:"kind,omitempty"`
	Span     string `json:"span"`
	NameID   uint64 `json:"name_id,omitempty"`
	CgroupID uint64 `json:"cgroup_id"`
	// SourceLabels are the source's labels (labels: in a source), by name; a
	// value past the source's cap is "other".
	SourceLabels map[string]string `json:"labels,omitempty"`
	// Identity names the cgroup: its path, container, pod, unit and
	// process (the JSON fields cgroup, container_id, ... process).
	Identity

	Count      uint64  `json:"count"`
	Rate       float64 `json:"rate"` // spans (or values) per second over the window
	Errors     uint64  `json:"errors"`
	ErrorRatio float64 `json:"error_ratio"`
	// Span durations in nanoseconds: the sum, the window's exact extremes
	// and its quantiles.
	SumNs uint64 `json:"sum_ns"`
	MinNs uint64 `json:"min_ns"`
	P50Ns uint64 `json:"p50_ns"`
	P90Ns uint64 `json:"p90_ns"`
	P99Ns uint64 `json:"p99_ns"`
	MaxNs uint64 `json:"max_ns"`
	// Metric values (Kind "metric"): the signed sum, the window's exact
	// extremes and quantiles.
	Sum int64   `json:"sum,omitempty"`
	Min int64   `json:"min,omitempty"`
	Max int64   `json:"max,omitempty"`
	P50 float64 `json:"p50,omitempty"`
	P90 float64 `json:"p90,omitempty"`
	P99 float64 `json:"p99,omitempty"`

	OverBudget uint64 `json:"over_budget"`
	BudgetNs   uint64 `json:"budget_ns,omitempty"`
	// Histogram holds the window's non-empty buckets, sorted: Prometheus'
	// native schema-6 buckets (see Bucket), which merge exactly across
	// windows (MergeHistogram).
	Histogram []Bucket `json:"histogram,omitempty"`
}

// IsMetric reports whether the series is an argument metric.
func (s *Series) IsMetric() bool { return s.Kind == KindMetric }

// KindMetric is Series.Kind of an argument metric.
const KindMetric = "metric"

// An Identity is what the cgroup a series or an overrun ran in is, as the
// collector's cgroup resolver names it: a series and an overrun carry the
// same fields, filled in one place (the collector's identity) and turned
// into labels in one place (AddLabels).
type Identity struct {
	// Cgroup is the cgroup's path under /sys/fs/cgroup, when known.
	Cgroup string `json:"cgroup,omitempty"`
	// ContainerID, PodUID and Unit are read from the cgroup path where the
	// path names them (docker, containerd, CRI-O; Kubernetes; systemd).
	ContainerID string `json:"container_id,omitempty"`
	PodUID      string `json:"pod_uid,omitempty"`
	Unit        string `json:"unit,omitempty"`
	// Namespace, Pod and Container are the Kubernetes names of the pod
	// and the container, where the node tells them (the kubelet's log
	// directories, the CRI runtime's container configs).
	Namespace string `json:"namespace,omitempty"`
	Pod       string `json:"pod,omitempty"`
	Container string `json:"container,omitempty"`
	// Process is the executable name of the cgroup's processes, when they
	// all run one executable.
	Process string `json:"process,omitempty"`
	// Service is the OpenTelemetry service name the cgroup's processes
	// declare in their environment (OTEL_SERVICE_NAME, or service.name in
	// OTEL_RESOURCE_ATTRIBUTES), when those declaring one agree.
	Service string `json:"service,omitempty"`
}

// AddLabels sets l's identity labels from w: cgroup, container_id,
// pod_uid, unit, namespace, pod, container, process and service, each
// where known.
func (w *Identity) AddLabels(l map[string]string) {
	for k, v := range map[string]string{"cgroup": w.Cgroup, "container_id": w.ContainerID, "pod_uid": w.PodUID, "unit": w.Unit,
		"namespace": w.Namespace, "pod": w.Pod, "container": w.Container, "process": w.Process, "service": w.Service} {
		if v != "" {
			l[k] = v
		}
	}
}

// Labels returns the series' identifying labels, as rules and alerts see them.
func (s *Series) Labels() map[string]string {
	l := map[string]string{"span": s.Span}
	if s.CgroupID != 0 {
		l["cgroup_id"] = fmt.Sprint(s.CgroupID)
	}
	for k, v := range s.SourceLabels {
		l[k] = v
	}
	s.Identity.AddLabels(l)
	return l
}

// An Overrun is one span that took longer than its budget, captured by the
// BPF program at the moment the span ended (or, with StillRunning, while it
// was still running).
type Overrun struct {
	Time     time.Time `json:"time"`
	Span     string    `json:"span"`
	NameID   uint64    `json:"name_id,omitempty"`
	PID      uint32    `json:"pid"`
	TID      uint32    `json:"tid"`
	Comm     string    `json:"comm"`
	CgroupID uint64    `json:"cgroup_id"`
	// Identity names the cgroup as on the span's series, so that an
	// overrun names the same series its span was counted in (metrics puts
	// its trace id on that series as an exemplar). Process is the
	// cgroup's executable, Comm the thread's own name.
	Identity
	// SourceLabels are the span's source labels, as on its series.
	SourceLabels map[string]string `json:"labels,omitempty"`
	DurationNs   uint64            `json:"duration_ns"`
	BudgetNs     uint64            `json:"budget_ns"`
	Error        bool              `json:"error,omitempty"`
	// TraceID and SpanID are lower-case hex, empty when the span had none.
	TraceID      string `json:"trace_id,omitempty"`
	SpanID       string `json:"span_id,omitempty"`
	StillRunning bool   `json:"still_running,omitempty"`
	// Source names the span source: "user_events", "marker", "usdt",
	// "eventheader", "user_event_fields" or "functions".
	Source      string  `json:"source,omitempty"`
	UserStack   []Frame `json:"user_stack,omitempty"`
	KernelStack []Frame `json:"kernel_stack,omitempty"`
	// StackError says why the stack is missing or short, when it is.
	StackError string `json:"stack_error,omitempty"`
	// Samples are the stacks the in-flight sampler took while the span ran
	// past its budget (see Sample): where its time went, where UserStack
	// says only where it ended.
	Samples []Sample `json:"samples,omitempty"`
}

// A Frame is one stack frame. Function is empty when the address could not
// be symbolized; Module and Offset still say where it points.
type Frame struct {
	Addr     uint64 `json:"addr"`
	Function string `json:"function,omitempty"`
	File     string `json:"file,omitempty"`
	Line     int    `json:"line,omitempty"`
	Module   string `json:"module,omitempty"`
	Offset   uint64 `json:"offset,omitempty"`
	// BuildID identifies Module's exact build: the GNU build id in hex, or
	// a Go binary's build id, so the frame can be symbolized again offline
	// (pprof, addr2line with a debuginfod server).
	BuildID string `json:"build_id,omitempty"`
	// Inlined says the compiler inlined Function into the next frame's
	// function: both frames are the same address, and File and Line are
	// where the inlined code sits.
	Inlined bool `json:"inlined,omitempty"`
}

// String renders the frame the way stack traces are usually read:
// "function (file:line)", or "module+0xoffset" when unsymbolized.
func (f Frame) String() string {
	switch {
	case f.Function != "" && f.File != "":
		return fmt.Sprintf("%s (%s:%d)", f.Function, f.File, f.Line)
	case f.Function != "":
		return f.Function
	case f.Module != "":
		return fmt.Sprintf("%s+0x%x", f.Module, f.Offset)
	default:
		return fmt.Sprintf("0x%x", f.Addr)
	}
}

// Stats are the collector's own counters over the window. Nothing the
// collector loses is silent: every drop is counted here.
type Stats struct {
	// Events is the number of span events the BPF programs aggregated.
	Events uint64 `json:"events"`
	// RingbufDrops counts overrun records lost because the ring buffer was
	// full.
	RingbufDrops uint64 `json:"ringbuf_drops"`
	// StatsFull counts values not aggregated because there was no room for
	// a new series (every slot of the kernel's series array in use).
	StatsFull uint64 `json:"stats_full"`
	// HistogramFull counts values counted in their series but left out of
	// its histogram: no free histogram cell.
	HistogramFull uint64 `json:"histogram_full,omitempty"`
	// NamesTruncated counts names cut to 127 bytes (on a UTF-8 boundary).
	NamesTruncated uint64 `json:"names_truncated,omitempty"`
	// QuotaOther counts values counted in a workload's "(other)" series
	// because the workload held its series quota.
	QuotaOther uint64 `json:"quota_other,omitempty"`
	// NamesFull counts new series whose name did not fit in the kernel's
	// names map (they show as name#ID).
	NamesFull uint64 `json:"names_full,omitempty"`
	// ExtremesDropped counts updates of a series' min or max that the
	// kernel gave up after losing their compare-and-swap race 8 times
	// (COUNTER_MINMAX_RETRIES): that window's min or max may miss the
	// value; its count, sum and histogram have it.
	ExtremesDropped uint64 `json:"extremes_dropped,omitempty"`
	// SourceEvents counts, by "source/reason", the events of user_events,
	// EventHeader and USDT sources that did not become a value as they
	// should have (short, bad_loc, unpaired_end, nest_overflow, a refused
	// EventHeader field...) and label values keyed "other" (label_other):
	// never guessed, always counted.
	SourceEvents map[string]uint64 `json:"source_events,omitempty"`
	// Sources are the configured sources that count their probes' hits
	// (USDT): each one's hits over the window, and whether it is silent.
	Sources []SourceHealth `json:"sources,omitempty"`
	// UserFiles counts, by reason, the files users control (binaries,
	// debug files, perf maps, their processes' /proc files) that were
	// refused or read only in part: symlink, not_regular, owner, access,
	// too_large, timeout, busy, and the parsing caps (section_size,
	// decompressed_size, symbols, line_rows, module_memory, memory,
	// perf_map_size, ...). See internal/userfile.
	UserFiles map[string]uint64 `json:"user_files,omitempty"`
	// SymbolizerBytes is the memory the symbolizer's tables, perf maps
	// and caches take now (symbolize.Limits.Memory bounds it).
	SymbolizerBytes uint64 `json:"symbolizer_bytes,omitempty"`
	// RecursionMisses counts program runs the kernel skipped because a
	// BPF program was already running on that CPU: spans lost.
	RecursionMisses uint64 `json:"recursion_misses,omitempty"`
	// ExtremesFromBuckets says that the series' min and max are the
	// bounds of their lowest and highest histogram buckets (exact for a
	// window of one value), and their quantiles the buckets' midpoints:
	// the kernel has no BPF compare-and-swap (before 5.12), so it keeps
	// no exact extremes. Counts, sums and histograms are exact all the
	// same.
	ExtremesFromBuckets bool `json:"extremes_from_buckets,omitempty"`
	// SeriesLive and SeriesCapacity are the series the kernel holds now
	// and can hold; BPFMapBytes is the memory its maps take now.
	SeriesLive     uint64 `json:"series_live,omitempty"`
	SeriesCapacity uint64 `json:"series_capacity,omitempty"`
	BPFMapBytes    uint64 `json:"bpf_map_bytes,omitempty"`
	// ShortEvents counts payloads shorter than struct span_event.
	ShortEvents uint64 `json:"short_events"`
	// ReadErrors counts payloads the BPF program could not read (for
	// example a marker argument pointing at unmapped memory).
	ReadErrors uint64 `json:"read_errors"`
	// OverrunsDropped counts overrun records the collector read but had no
	// room to keep for this snapshot.
	OverrunsDropped uint64 `json:"overruns_dropped"`
	// OverrunsQueueDropped counts overrun records read from the ring
	// buffer but dropped because the queue to the worker that symbolizes
	// and delivers them was full (collector.Config.OverrunQueue).
	OverrunsQueueDropped uint64 `json:"overruns_queue_dropped,omitempty"`
	// EarlySamplesDiscarded counts in-span samples of spans sampled from
	// their start (a budget's sample_from_start) that ended within their
	// budgets, and so were discarded: by design, not a loss (the span was
	// not slow).
	EarlySamplesDiscarded uint64 `json:"early_samples_discarded,omitempty"`
	// ReadNs is how long reading the maps took.
	ReadNs int64 `json:"read_ns"`
}

// Encode writes s as indented JSON.
//
// It writes s item by item (each series, each overrun), so that encoding
// a snapshot of many series holds one item at a time, not the whole
// document; the bytes are those json.Encoder with SetIndent("", "  ")
// writes for s.
func (s *Snapshot) Encode(w io.Writer) error {
	bw := bufio.NewWriterSize(w, 64<<10)
	var item bytes.Buffer
	enc := json.NewEncoder(&item)
	put := func(v any, prefix string) ([]byte, error) {
		item.Reset()
		enc.SetIndent(prefix, "  ")
		if err := enc.Encode(v); err != nil {
			return nil, err
		}
		return bytes.TrimSuffix(item.Bytes(), []byte("\n")), nil
	}
	head, err := put(partHead{Version: s.Version, Time: s.Time, WindowNs: s.WindowNs, Host: s.Host, Part: s.Part, More: s.More}, "")
	if err != nil {
		return err
	}
	bw.Write(head[:len(head)-2]) // without "\n}"
	bw.WriteString(",\n  \"series\": ")
	list := func(n int, at func(int) any) error {
		if n == 0 {
			bw.WriteString("[]")
			return nil
		}
		bw.WriteString("[\n    ")
		for i := 0; i < n; i++ {
			if i > 0 {
				bw.WriteString(",\n    ")
			}
			b, err := put(at(i), "    ")
			if err != nil {
				return err
			}
			bw.Write(b)
		}
		bw.WriteString("\n  ]")
		return nil
	}
	if s.Series == nil {
		bw.WriteString("null")
	} else if err := list(len(s.Series), func(i int) any { return &s.Series[i] }); err != nil {
		return err
	}
	if len(s.Overruns) > 0 {
		bw.WriteString(",\n  \"overruns\": ")
		if err := list(len(s.Overruns), func(i int) any { return &s.Overruns[i] }); err != nil {
			return err
		}
	}
	stats, err := put(&s.Stats, "  ")
	if err != nil {
		return err
	}
	bw.WriteString(",\n  \"stats\": ")
	bw.Write(stats)
	bw.WriteString("\n}\n")
	return bw.Flush()
}

// Decode reads one JSON snapshot: version 2, or version 1 converted (see
// decodeV1).
func Decode(r io.Reader) (*Snapshot, error) {
	data, err := io.ReadAll(r)
	if err != nil {
		return nil, fmt.Errorf("decode snapshot: %w", err)
	}
	var v struct {
		Version int `json:"version"`
	}
	if err := json.Unmarshal(data, &v); err != nil {
		return nil, fmt.Errorf("decode snapshot: %w", err)
	}
	switch v.Version {
	case Version:
		var s Snapshot
		dec := json.NewDecoder(bytes.NewReader(data))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&s); err != nil {
			return nil, fmt.Errorf("decode snapshot: %w", err)
		}
		return &s, nil
	case 1:
		return decodeV1(data)
	}
	return nil, fmt.Errorf("decode snapshot: version %d, want %d (or 1)", v.Version, Version)
}

// SourceHealth is one configured source's probes over a window.
type SourceHealth struct {
	Source   string `json:"source"`             // the kind of source: "usdt"
	Name     string `json:"name"`               // its span or metric name, or the probe naming it
	Declared string `json:"declared,omitempty"` // where the configuration declares it (file:line:col)
	Sites    int    `json:"sites"`              // call sites attached
	Hits     uint64 `json:"hits"`               // probe hits over the window (ends of pairs, single probes)
	// Unpaired and NestOverflow count, over the window, its ends without
	// an open start and its starts lost to deeper ones on a full thread
	// stack (source_events has them summed over sources).
	Unpaired     uint64 `json:"unpaired_ends,omitempty"`
	NestOverflow uint64 `json:"nest_overflows,omitempty"`
	// Silent: attached its silent_after ago and no span or value since
	// (no hit, or only ends without a start).
	Silent bool `json:"silent,omitempty"`
	// Hint names the runtime switch known to make a silent source's
	// probes fire (-XX:+ExtendedDTraceProbes, USE_ZEND_DTRACE=1, ...).
	Hint string `json:"hint,omitempty"`
}
