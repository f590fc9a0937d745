package policy

import (
	"math"
	"time"

	"github.com/open-policy-agent/opa/v1/ast"

	"github.com/spanwatch/spanwatch/snapshot"
)

// An InputValue is a policy's input, converted from a snapshot once (Input,
// RangeInput, Batch.Input) for Policy.Eval. It keeps OPA's types inside
// this package: the detector holds inputs and hands them back, and never
// imports OPA. It is read-only and may be shared between goroutines.
type InputValue struct{ v ast.Value }

// Input converts a snapshot into the value a policy sees as input, every
// series included: what a policy over the newest window alone (over: 0s)
// would get without Batch's filtering. The shape (histograms are left
// out):
//
//	{
//	  "time": "2026-01-02T15:04:05Z", "time_ns": 1767366245000000000,
//	  "window_ns": 10000000000, "window_seconds": 10, "host": "node1",
//	  "range_ns": 60000000000, "range_seconds": 60,
//	  "series": [{"span": "checkout", "cgroup_id": 1234, "cgroup": "...",
//	              "container": "...", "pod": "...", "unit": "...", "process": "...",
//	              "service": "...",
//	              "count": 100, "rate": 10, "errors": 2, "error_ratio": 0.02,
//	              "sum_ns": ..., "min_ns": ..., "p50_ns": ..., "p90_ns": ..., "p99_ns": ...,
//	              "max_ns": ..., "window_max_ns": ..., "over_budget": 1,
//	              "budget_ns": 250000000, "labels": {"span": "checkout", ...}}],
//	              (an argument metric adds "kind": "metric" and its values:
//	              "sum", "min", "max", "p50", "p90", "p99"; a source's
//	              labels are in "labels")
//	  "by_span": {"checkout": [<the checkout series>], ...},
//	  "overruns": [{"span": ..., "pid": ..., "comm": ..., "duration_ns": ...,
//	                "budget_ns": ..., "trace_id": ..., "container": ..., ...}],
//	  "stats": {"events": ..., "ringbuf_drops": ..., ...}
//	}
//
// input.stats holds every number of the snapshot's stats, by its JSON
// name (snapshot.StatFields): events, ringbuf_drops, stats_full,
// histogram_full, names_truncated, quota_other, names_full,
// extremes_dropped, symbolizer_bytes, recursion_misses, series_live,
// series_capacity, bpf_map_bytes, short_events, read_errors,
// overruns_dropped, overruns_queue_dropped and early_samples_discarded,
// each 0 when the snapshot
// has none.
//
// by_span indexes the same series by span name, so a policy about one span
// looks its series up (input.by_span.checkout) instead of scanning them
// all.
func Input(s *snapshot.Snapshot) InputValue {
	return RangeInput(s, s.Series, s.Window())
}

// RangeInput is Input with the series aggregated over a range (a policy's
// over:), covering covered: input.series and input.by_span hold them, and
// input.range_ns and input.range_seconds say how long the range is.
func RangeInput(s *snapshot.Snapshot, ser []snapshot.Series, covered time.Duration) InputValue {
	b := NewBatch(s)
	r := b.rangeInput(ser, covered)
	return b.object(r, r.allTerm(), r.bySpanAll())
}

// A Batch is one evaluation's input for many policies. It converts the
// snapshot-wide parts once and each series at most once, and only the
// series a policy's input holds: a policy whose rules walk input.series
// behind comparisons of a series field with a constant (s.count >= 10,
// s.p99_ns > data.limit_ns) gets only the series that pass them, since no
// other series could make those rules hold (see Policy.Prefilter); a
// policy that reads input.by_span only by constant names gets only those
// spans. The values Input returns are read-only and may be shared between
// goroutines; the Batch itself is for one goroutine.
type Batch struct {
	snap   *snapshot.Snapshot
	base   [][2]*ast.Term
	ranges map[rangeKey]*rangeInput
	sel    []int32
}

type rangeKey struct {
	first   *snapshot.Series
	n       int
	covered time.Duration
}

// NewBatch starts the input of one evaluation of snapshot s.
func NewBatch(s *snapshot.Snapshot) *Batch {
	overruns := make([]*ast.Term, len(s.Overruns))
	for i := range s.Overruns {
		overruns[i] = ast.NewTerm(overrunObject(&s.Overruns[i]))
	}
	st := s.Stats
	return &Batch{snap: s, ranges: map[rangeKey]*rangeInput{}, base: [][2]*ast.Term{
		item(kTime, strTerm(s.Time.UTC().Format("2006-01-02T15:04:05.999999999Z07:00"))),
		item(kTimeNs, ast.IntNumberTerm(int(s.Time.UnixNano()))),
		item(kWindowNs, ast.IntNumberTerm(int(s.WindowNs))),
		item(kWindowSeconds, ast.FloatNumberTerm(float64(s.WindowNs)/1e9)),
		item(kHost, strTerm(s.Host)),
		item(kOverruns, ast.ArrayTerm(overruns...)),
		item(kStats, statsTerm(&st)),
	}}
}

// statKeys are the keys of input.stats: snapshot.StatFields' names.
var statKeys = func() []*ast.Term {
	k := make([]*ast.Term, len(snapshot.StatFields))
	for i, f := range snapshot.StatFields {
		k[i] = ast.StringTerm(f.Name)
	}
	return k
}()

// statsTerm is input.stats: every number of snapshot.StatFields, by its
// JSON name.
func statsTerm(st *snapshot.Stats) *ast.Term {
	items := make([][2]*ast.Term, len(snapshot.StatFields))
	for i, f := range snapshot.StatFields {
		items[i] = item(statKeys[i], uintTerm(f.Get(st)))
	}
	return ast.ObjectTerm(items...)
}

// Input returns policy p's input with series, the snapshot's series
// aggregated over the policy's range (which covers covered): every series
// the policy could read, converted once for all the policies of the batch.
func (b *Batch) Input(p *Policy, series []snapshot.Series, covered time.Duration) InputValue {
	r := b.rangeInput(series, covered)
	var ser, by *ast.Term
	switch p.needs.series {
	case needNone:
		ser = emptyArray
	case needAll:
		ser = r.allTerm()
	default:
		b.sel = p.needs.filter(series, b.sel[:0])
		terms := make([]*ast.Term, len(b.sel))
		for j, i := range b.sel {
			terms[j] = r.term(int(i))
		}
		ser = ast.ArrayTerm(terms...)
	}
	switch p.needs.bySpan {
	case needNone:
		by = emptyObject
	case needAll:
		by = r.bySpanAll()
	default:
		by = r.bySpanOf(p.needs.spans)
	}
	return b.object(r, ser, by)
}

func (b *Batch) object(r *rangeInput, series, bySpan *ast.Term) InputValue {
	items := make([][2]*ast.Term, 0, len(b.base)+4)
	items = append(items, b.base...)
	items = append(items,
		item(kRangeNs, ast.IntNumberTerm(int(r.covered))),
		item(kRangeSeconds, ast.FloatNumberTerm(r.covered.Seconds())),
		item(kSeries, series),
		item(kBySpan, bySpan),
	)
	return InputValue{ast.NewObject(items...)}
}

var (
	emptyArray  = ast.ArrayTerm()
	emptyObject = ast.ObjectTerm()
)

// rangeInput is the series of one range, converted on demand.
type rangeInput struct {
	series  []snapshot.Series
	covered time.Duration
	terms   []*ast.Term // nil until converted
	all     *ast.Term
	byAll   *ast.Term
	spans   map[string][]int32
	order   []string
}

func (b *Batch) rangeInput(series []snapshot.Series, covered time.Duration) *rangeInput {
	k := rangeKey{n: len(series), covered: covered}
	if len(series) > 0 {
		k.first = &series[0]
	}
	r := b.ranges[k]
	if r == nil {
		r = &rangeInput{series: series, covered: covered, terms: make([]*ast.Term, len(series))}
		b.ranges[k] = r
	}
	return r
}

func (r *rangeInput) term(i int) *ast.Term {
	if r.terms[i] == nil {
		r.terms[i] = ast.NewTerm(seriesObject(&r.series[i]))
	}
	return r.terms[i]
}

func (r *rangeInput) allTerm() *ast.Term {
	if r.all == nil {
		terms := make([]*ast.Term, len(r.series))
		for i := range r.series {
			terms[i] = r.term(i)
		}
		r.all = ast.ArrayTerm(terms...)
	}
	return r.all
}

func (r *rangeInput) index() {
	if r.spans != nil {
		return
	}
	r.spans = map[string][]int32{}
	for i := range r.series {
		name := r.series[i].Span
		l, ok := r.spans[name]
		if !ok {
			r.order = append(r.order, name)
		}
		r.spans[name] = append(l, int32(i))
	}
}

// spanTerm is the array of one span's series: an index into the same
// terms as input.series, not a copy.
func (r *rangeInput) spanTerm(name string) *ast.Term {
	idx := r.spans[name]
	terms := make([]*ast.Term, len(idx))
	for j, i := range idx {
		terms[j] = r.term(int(i))
	}
	return ast.ArrayTerm(terms...)
}

func (r *rangeInput) bySpanAll() *ast.Term {
	if r.byAll == nil {
		r.index()
		items := make([][2]*ast.Term, len(r.order))
		for i, name := range r.order {
			items[i] = item(strTerm(name), r.spanTerm(name))
		}
		r.byAll = ast.ObjectTerm(items...)
	}
	return r.byAll
}

// bySpanOf is by_span with only the named spans (those the snapshot has).
func (r *rangeInput) bySpanOf(names []string) *ast.Term {
	r.index()
	items := make([][2]*ast.Term, 0, len(names))
	for _, name := range names {
		if _, ok := r.spans[name]; ok {
			items = append(items, item(strTerm(name), r.spanTerm(name)))
		}
	}
	return ast.ObjectTerm(items...)
}

func item(k, v *ast.Term) [2]*ast.Term { return [2]*ast.Term{k, v} }

// Keys are shared between series: a term used as a key is never mutated.
var (
	kTime          = ast.StringTerm("time")
	kTimeNs        = ast.StringTerm("time_ns")
	kWindowNs      = ast.StringTerm("window_ns")
	kWindowSeconds = ast.StringTerm("window_seconds")
	kRangeNs       = ast.StringTerm("range_ns")
	kRangeSeconds  = ast.StringTerm("range_seconds")
	kHost          = ast.StringTerm("host")
	kSeries        = ast.StringTerm("series")
	kBySpan        = ast.StringTerm("by_span")
	kOverruns      = ast.StringTerm("overruns")
	kStats         = ast.StringTerm("stats")

	kSpan        = ast.StringTerm("span")
	kCgroupID    = ast.StringTerm("cgroup_id")
	kCgroup      = ast.StringTerm("cgroup")
	kContainer   = ast.StringTerm("container")
	kPod         = ast.StringTerm("pod")
	kContainerID = ast.StringTerm("container_id")
	kPodUID      = ast.StringTerm("pod_uid")
	kNamespace   = ast.StringTerm("namespace")
	kUnit        = ast.StringTerm("unit")
	kProcess     = ast.StringTerm("process")
	kService     = ast.StringTerm("service")
	kCount       = ast.StringTerm("count")
	kRate        = ast.StringTerm("rate")
	kErrors      = ast.StringTerm("errors")
	kErrorRatio  = ast.StringTerm("error_ratio")
	kSumNs       = ast.StringTerm("sum_ns")
	kMinNs       = ast.StringTerm("min_ns")
	kP50         = ast.StringTerm("p50_ns")
	kP90         = ast.StringTerm("p90_ns")
	kP99         = ast.StringTerm("p99_ns")
	kMax         = ast.StringTerm("max_ns")
	kWindowMax   = ast.StringTerm("window_max_ns")
	kOverBudget  = ast.StringTerm("over_budget")
	kBudgetNs    = ast.StringTerm("budget_ns")
	kLabels      = ast.StringTerm("labels")
	kPID         = ast.StringTerm("pid")
	kTID         = ast.StringTerm("tid")
	kComm        = ast.StringTerm("comm")
	kDurationNs  = ast.StringTerm("duration_ns")
	kTraceID     = ast.StringTerm("trace_id")
	kSpanID      = ast.StringTerm("span_id")
	kError       = ast.StringTerm("error")
	kStillRun    = ast.StringTerm("still_running")
	kSource      = ast.StringTerm("source")
	kFrames      = ast.StringTerm("user_stack")
	kOverrunTime = ast.StringTerm("time")
)

// fieldKind is the type of a series field in the input.
type fieldKind uint8

const (
	fieldUint fieldKind = iota
	fieldFloat
	fieldString
)

// A seriesField is one field of a series object in the input, with how to
// read it from a snapshot.Series: Prefilter's guards read fields through
// it, and TestSeriesFields checks it against seriesObject.
type seriesField struct {
	name string
	key  *ast.Term
	kind fieldKind
	u    func(*snapshot.Series) uint64
	f    func(*snapshot.Series) float64
	s    func(*snapshot.Series) string
}

func (f *seriesField) term(s *snapshot.Series) *ast.Term {
	switch f.kind {
	case fieldUint:
		return uintTerm(f.u(s))
	case fieldFloat:
		return ast.FloatNumberTerm(f.f(s))
	}
	return strTerm(f.s(s))
}

func strField(name string, g func(*snapshot.Series) string) seriesField {
	return seriesField{name: name, key: ast.StringTerm(name), kind: fieldString, s: g}
}

func uintField(name string, g func(*snapshot.Series) uint64) seriesField {
	return seriesField{name: name, key: ast.StringTerm(name), kind: fieldUint, u: g}
}

func floatField(name string, g func(*snapshot.Series) float64) seriesField {
	return seriesField{name: name, key: ast.StringTerm(name), kind: fieldFloat, f: g}
}

// seriesFields are a series object's fields, labels aside.
var seriesFields = []seriesField{
	strField("span", func(s *snapshot.Series) string { return s.Span }),
	uintField("cgroup_id", func(s *snapshot.Series) uint64 { return s.CgroupID }),
	strField("cgroup", func(s *snapshot.Series) string { return s.Cgroup }),
	strField("container_id", func(s *snapshot.Series) string { return s.ContainerID }),
	strField("pod_uid", func(s *snapshot.Series) string { return s.PodUID }),
	strField("unit", func(s *snapshot.Series) string { return s.Unit }),
	strField("namespace", func(s *snapshot.Series) string { return s.Namespace }),
	strField("pod", func(s *snapshot.Series) string { return s.Pod }),
	strField("container", func(s *snapshot.Series) string { return s.Container }),
	strField("process", func(s *snapshot.Series) string { return s.Process }),
	strField("service", func(s *snapshot.Series) string { return s.Service }),
	uintField("count", func(s *snapshot.Series) uint64 { return s.Count }),
	floatField("rate", func(s *snapshot.Series) float64 { return finite(s.Rate) }),
	uintField("errors", func(s *snapshot.Series) uint64 { return s.Errors }),
	floatField("error_ratio", func(s *snapshot.Series) float64 { return MetricErrorRatio.Value(s) }),
	uintField("sum_ns", func(s *snapshot.Series) uint64 { return s.SumNs }),
	uintField("min_ns", func(s *snapshot.Series) uint64 { return s.MinNs }),
	uintField("p50_ns", func(s *snapshot.Series) uint64 { return s.P50Ns }),
	uintField("p90_ns", func(s *snapshot.Series) uint64 { return s.P90Ns }),
	uintField("p99_ns", func(s *snapshot.Series) uint64 { return s.P99Ns }),
	uintField("max_ns", func(s *snapshot.Series) uint64 { return s.MaxNs }),
	// window_max_ns is kept for policies written against version 1.
	uintField("window_max_ns", func(s *snapshot.Series) uint64 { return s.MaxNs }),
	uintField("over_budget", func(s *snapshot.Series) uint64 { return s.OverBudget }),
	uintField("budget_ns", func(s *snapshot.Series) uint64 { return s.BudgetNs }),
}

var fieldByName = func() map[string]*seriesField {
	m := map[string]*seriesField{}
	for i := range seriesFields {
		m[seriesFields[i].name] = &seriesFields[i]
	}
	return m
}()

func seriesObject(s *snapshot.Series) ast.Object {
	labels := make([][2]*ast.Term, 0, 9+len(s.SourceLabels))
	labels = append(labels, item(kSpan, strTerm(s.Span)))
	for _, kv := range [...]struct {
		k *ast.Term
		v string
	}{{kCgroup, s.Cgroup}, {kContainerID, s.ContainerID}, {kPodUID, s.PodUID}, {kUnit, s.Unit},
		{kNamespace, s.Namespace}, {kPod, s.Pod}, {kContainer, s.Container}, {kProcess, s.Process}, {kService, s.Service}} {
		if kv.v != "" {
			labels = append(labels, item(kv.k, strTerm(kv.v)))
		}
	}
	for k, v := range s.SourceLabels {
		switch k {
		case "span", "cgroup", "container_id", "pod_uid", "unit", "namespace", "pod", "container", "process", "service":
			continue // the series' own labels win, as in Series.Labels
		}
		labels = append(labels, item(ast.StringTerm(k), strTerm(v)))
	}
	// Written out, not a loop over seriesFields: this is the hot path of
	// conversion. TestSeriesFields checks the two agree field by field.
	obj := ast.NewObject(
		item(kSpan, strTerm(s.Span)),
		item(kCgroupID, uintTerm(s.CgroupID)),
		item(kCgroup, strTerm(s.Cgroup)),
		item(kContainerID, strTerm(s.ContainerID)),
		item(kPodUID, strTerm(s.PodUID)),
		item(kUnit, strTerm(s.Unit)),
		item(kNamespace, strTerm(s.Namespace)),
		item(kPod, strTerm(s.Pod)),
		item(kContainer, strTerm(s.Container)),
		item(kProcess, strTerm(s.Process)),
		item(kService, strTerm(s.Service)),
		item(kCount, uintTerm(s.Count)),
		item(kRate, ast.FloatNumberTerm(finite(s.Rate))),
		item(kErrors, uintTerm(s.Errors)),
		item(kErrorRatio, ast.FloatNumberTerm(MetricErrorRatio.Value(s))),
		item(kSumNs, uintTerm(s.SumNs)),
		item(kMinNs, uintTerm(s.MinNs)),
		item(kP50, uintTerm(s.P50Ns)),
		item(kP90, uintTerm(s.P90Ns)),
		item(kP99, uintTerm(s.P99Ns)),
		item(kMax, uintTerm(s.MaxNs)),
		item(kWindowMax, uintTerm(s.MaxNs)),
		item(kOverBudget, uintTerm(s.OverBudget)),
		item(kBudgetNs, uintTerm(s.BudgetNs)),
		item(kLabels, ast.ObjectTerm(labels...)),
	)
	if s.IsMetric() {
		addValueFields(obj, s)
	}
	return obj
}

func overrunObject(o *snapshot.Overrun) ast.Object {
	frames := make([]*ast.Term, len(o.UserStack))
	for i, f := range o.UserStack {
		frames[i] = strTerm(f.String())
	}
	return ast.NewObject(
		item(kOverrunTime, strTerm(o.Time.UTC().Format("2006-01-02T15:04:05.999999999Z07:00"))),
		item(kSpan, strTerm(o.Span)),
		item(kPID, uintTerm(uint64(o.PID))),
		item(kTID, uintTerm(uint64(o.TID))),
		item(kComm, strTerm(o.Comm)),
		item(kCgroupID, uintTerm(o.CgroupID)),
		item(kCgroup, strTerm(o.Cgroup)),
		item(kContainerID, strTerm(o.ContainerID)),
		item(kPodUID, strTerm(o.PodUID)),
		item(kUnit, strTerm(o.Unit)),
		item(kNamespace, strTerm(o.Namespace)),
		item(kPod, strTerm(o.Pod)),
		item(kContainer, strTerm(o.Container)),
		item(kProcess, strTerm(o.Process)),
		item(kService, strTerm(o.Service)),
		item(kDurationNs, uintTerm(o.DurationNs)),
		item(kBudgetNs, uintTerm(o.BudgetNs)),
		item(kError, ast.BooleanTerm(o.Error)),
		item(kTraceID, strTerm(o.TraceID)),
		item(kSpanID, strTerm(o.SpanID)),
		item(kStillRun, ast.BooleanTerm(o.StillRunning)),
		item(kSource, strTerm(o.Source)),
		item(kFrames, ast.ArrayTerm(frames...)),
	)
}

// uintTerm and strTerm reuse OPA's interned terms for small numbers and
// common strings (0, "", ...), which most fields of a quiet series are.
func uintTerm(v uint64) *ast.Term {
	if v <= math.MaxInt64 {
		return ast.InternedTerm(int64(v))
	}
	return ast.UIntNumberTerm(v)
}

func strTerm(s string) *ast.Term { return ast.InternedTerm(s) }
