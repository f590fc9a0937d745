package policy

import (
	"math"

	"github.com/open-policy-agent/opa/v1/ast"
	"github.com/spanwatch/spanwatch/snapshot"
)

// Input converts a snapshot into the value every policy sees as input. The
// detector converts each snapshot once and passes the same value to every
// policy (rego.EvalParsedInput), instead of letting OPA convert it again per
// policy.
//
// by_span indexes the same series by span name, so a policy about one span
// looks its series up (input.by_span.checkout) instead of scanning them
// all. The shape (histograms are left out):
//
//	{
//	  "time": "2026-01-02T15:04:05Z", "time_ns": 1767366245000000000,
//	  "window_ns": 10000000000, "window_seconds": 10, "host": "node1",
//	  "series": [{"span": "checkout", "cgroup_id": 1234, "cgroup": "...",
//	              "container": "...", "pod": "...", "unit": "...", "process": "...",
//	              "count": 100, "rate": 10, "errors": 2, "error_ratio": 0.02,
//	              "sum_ns": ..., "p50_ns": ..., "p90_ns": ..., "p99_ns": ...,
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
func Input(s *snapshot.Snapshot) ast.Value {
	series := make([]*ast.Term, len(s.Series))
	bySpan := map[string][]*ast.Term{}
	var spans []string
	for i := range s.Series {
		series[i] = ast.NewTerm(seriesObject(&s.Series[i]))
		name := s.Series[i].Span
		if _, ok := bySpan[name]; !ok {
			spans = append(spans, name)
		}
		bySpan[name] = append(bySpan[name], series[i])
	}
	// by_span shares the series terms: an index, not a copy.
	spanItems := make([][2]*ast.Term, len(spans))
	for i, name := range spans {
		spanItems[i] = item(strTerm(name), ast.ArrayTerm(bySpan[name]...))
	}
	overruns := make([]*ast.Term, len(s.Overruns))
	for i := range s.Overruns {
		overruns[i] = ast.NewTerm(overrunObject(&s.Overruns[i]))
	}
	st := s.Stats
	return ast.NewObject(
		item(kTime, strTerm(s.Time.UTC().Format("2006-01-02T15:04:05.999999999Z07:00"))),
		item(kTimeNs, ast.IntNumberTerm(int(s.Time.UnixNano()))),
		item(kWindowNs, ast.IntNumberTerm(int(s.WindowNs))),
		item(kWindowSeconds, ast.FloatNumberTerm(float64(s.WindowNs)/1e9)),
		item(kHost, strTerm(s.Host)),
		item(kSeries, ast.ArrayTerm(series...)),
		item(kBySpan, ast.ObjectTerm(spanItems...)),
		item(kOverruns, ast.ArrayTerm(overruns...)),
		item(kStats, ast.ObjectTerm(
			item(ast.StringTerm("events"), uintTerm(st.Events)),
			item(ast.StringTerm("ringbuf_drops"), uintTerm(st.RingbufDrops)),
			item(ast.StringTerm("stats_full"), uintTerm(st.StatsFull)),
			item(ast.StringTerm("short_events"), uintTerm(st.ShortEvents)),
			item(ast.StringTerm("overruns_dropped"), uintTerm(st.OverrunsDropped)),
		)),
	)
}

func item(k, v *ast.Term) [2]*ast.Term { return [2]*ast.Term{k, v} }

// Keys are shared between series: a term used as a key is never mutated.
var (
	kTime          = ast.StringTerm("time")
	kTimeNs        = ast.StringTerm("time_ns")
	kWindowNs      = ast.StringTerm("window_ns")
	kWindowSeconds = ast.StringTerm("window_seconds")
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
	kCount       = ast.StringTerm("count")
	kRate        = ast.StringTerm("rate")
	kErrors      = ast.StringTerm("errors")
	kErrorRatio  = ast.StringTerm("error_ratio")
	kSumNs       = ast.StringTerm("sum_ns")
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

func seriesObject(s *snapshot.Series) ast.Object {
	labels := make([][2]*ast.Term, 0, 9)
	labels = append(labels, item(kSpan, strTerm(s.Span)))
	for _, kv := range [...]struct {
		k *ast.Term
		v string
	}{{kCgroup, s.Cgroup}, {kContainerID, s.ContainerID}, {kPodUID, s.PodUID}, {kUnit, s.Unit},
		{kNamespace, s.Namespace}, {kPod, s.Pod}, {kContainer, s.Container}, {kProcess, s.Process}} {
		if kv.v != "" {
			labels = append(labels, item(kv.k, strTerm(kv.v)))
		}
	}
	for k, v := range s.SourceLabels {
		labels = append(labels, item(ast.StringTerm(k), strTerm(v)))
	}
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
		item(kCount, uintTerm(s.Count)),
		item(kRate, ast.FloatNumberTerm(finite(s.Rate))),
		item(kErrors, uintTerm(s.Errors)),
		item(kErrorRatio, ast.FloatNumberTerm(MetricErrorRatio.Value(s))),
		item(kSumNs, uintTerm(s.SumNs)),
		item(kP50, uintTerm(s.P50Ns)),
		item(kP90, uintTerm(s.P90Ns)),
		item(kP99, uintTerm(s.P99Ns)),
		item(kMax, uintTerm(s.MaxNs)),
		item(kWindowMax, uintTerm(s.MaxNs)), // kept for policies written against version 1
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
