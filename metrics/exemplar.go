package metrics

import (
	"cmp"
	"encoding/hex"
	"math"
	"slices"
	"sort"
	"time"

	"google.golang.org/protobuf/encoding/protowire"

	"github.com/spanwatch/spanwatch/snapshot"
)

// Exemplars link the latency histogram to traces. Each span series keeps
// at most one: the newest overrun (a span slower than its budget, whose
// stack spanwatch captured) that carried a trace id, with its trace and
// span ids as the labels trace_id and span_id (the names OpenTelemetry
// and Grafana look for), its duration as the value and its end as the
// timestamp. It is exposed at every scrape until a newer overrun of the
// series replaces it or the series leaves the export: Prometheus stores
// an exemplar once (one equal to the series' newest is a no-op), and a
// scrape that missed a window still gets it. An older overrun never
// replaces a newer one: Prometheus refuses exemplars older than the
// newest it has for a series.
//
// Where it goes is client_golang's choice, so that every Prometheus finds
// it where it looks (TestExpositionMatchesExpfmt holds the bytes to
// expfmt's):
//   - OpenMetrics text: on the _bucket line of the classic bucket the
//     value falls in (the first le >= value; +Inf above the last);
//   - protobuf: on that classic bucket (an explicit +Inf bucket when the
//     value is above every bound, or there are none) and, with native
//     histograms, in Histogram.exemplars too. Prometheus 2.42 to 2.50
//     read a native histogram's exemplars from its classic buckets only,
//     and only the first one per scrape; 2.51 and later read
//     Histogram.exemplars and need the timestamp, which spanwatch always
//     sets.
//   - The 0.0.4 text format has no exemplars.
//
// Only overruns carry trace ids to user space: a span within its budget
// is counted in the kernel and never seen one by one. An overrun whose
// in-span samples were taken while it ran is the same record at its end,
// with the trace id; the report of a span still running past its budget
// has none (its trace id is known only at its end).

// exemplar is one series' exemplar: 48 bytes, in view.exemplars.
type exemplar struct {
	traceID [16]byte
	spanID  [8]byte
	hasSpan bool
	valueNs uint64
	unixNs  int64
}

// exemplarLabelRunes is what the labels of an exemplar take against
// OpenMetrics' limit of 128 runes (names and values): trace_id and 32 hex
// digits, span_id and 16.
const exemplarLabelRunes = len("trace_id") + 32 + len("span_id") + 16

var _ = [128 - exemplarLabelRunes]struct{}{} // fits OpenMetrics' 128

// exemplarOf makes an overrun's exemplar: false when it has no valid
// trace id (32 hex digits, not all zero). A span id that is not 16 hex
// digits is left out.
func exemplarOf(ov *snapshot.Overrun, now time.Time) (exemplar, bool) {
	var ex exemplar
	if len(ov.TraceID) != 32 {
		return ex, false
	}
	if _, err := hex.Decode(ex.traceID[:], []byte(ov.TraceID)); err != nil || ex.traceID == [16]byte{} {
		return ex, false
	}
	if len(ov.SpanID) == 16 {
		if _, err := hex.Decode(ex.spanID[:], []byte(ov.SpanID)); err == nil && ex.spanID != [8]byte{} {
			ex.hasSpan = true
		}
	}
	ex.valueNs = ov.DurationNs
	at := ov.Time
	if at.IsZero() {
		at = now
	}
	ex.unixNs = at.UnixNano()
	return ex, true
}

// value is the exemplar's value in seconds, as the histogram's.
func (ex *exemplar) value() float64 { return float64(ex.valueNs) / 1e9 }

// classicBucket is the classic bucket the exemplar belongs to: the first
// le at or above its value, or len(le) for +Inf, as client_golang finds
// it.
func (ex *exemplar) classicBucket(c *classicBounds) int {
	if c == nil {
		return 0
	}
	return sort.SearchFloat64s(c.le, ex.value())
}

// seriesExemplar is an exemplar for the series at index idx of the view
// being built.
type seriesExemplar struct {
	idx int32
	ex  exemplar
}

// pickExemplars finds the series of s's overruns and keeps, per series
// (its index in the view being built), the newest overrun's exemplar in
// bd.best, sorted by index. An overrun names its series by the same labels (snapshot
// Overrun has the series' Identity), so it finds it even when its
// span was counted in an earlier window than the one it arrived in.
func (e *Exporter) pickExemplars(old *view, added []*seriesMeta, s *snapshot.Snapshot, now time.Time) {
	bd := &e.bd
	bd.best = bd.best[:0]
	for i := range s.Overruns {
		ov := &s.Overruns[i]
		ex, ok := exemplarOf(ov, now)
		if !ok {
			continue
		}
		sr := snapshot.Series{Span: ov.Span, Identity: ov.Identity, SourceLabels: ov.SourceLabels}
		var extra []string
		if len(sr.SourceLabels) > 0 {
			extra = bd.sourceLabelNames(sr.SourceLabels)
		}
		values := bd.labelValues(&sr, extra)
		idx, ok := e.find(old, added, false, extra, values, bd.hashSeries(false, extra, values))
		if !ok {
			continue
		}
		bd.best = append(bd.best, seriesExemplar{idx, ex})
	}
	// By series, the newest first; then one per series.
	slices.SortFunc(bd.best, func(a, b seriesExemplar) int {
		if c := cmp.Compare(a.idx, b.idx); c != 0 {
			return c
		}
		return cmp.Compare(b.ex.unixNs, a.ex.unixNs)
	})
	bd.best = slices.CompactFunc(bd.best, func(a, b seriesExemplar) bool { return a.idx == b.idx })
}

// Text: " # {trace_id="...",span_id="..."} value timestamp", appended to a
// _bucket line of OpenMetrics.
func (x *exposer) appendTextExemplar(b []byte, ex *exemplar) []byte {
	b = append(b, ` # {trace_id="`...)
	b = hex.AppendEncode(b, ex.traceID[:])
	if ex.hasSpan {
		b = append(b, `",span_id="`...)
		b = hex.AppendEncode(b, ex.spanID[:])
	}
	b = append(b, `"} `...)
	b = x.appendFloat(b, ex.value())
	b = append(b, ' ')
	return x.appendFloat(b, float64(ex.unixNs)/1e9)
}

// Protobuf: io.prometheus.client.Exemplar.
const (
	pbBucketExemplar                           = 3
	pbHistExemplars                            = 16
	pbExemplarLabel, pbExemplarValue, pbExTime = 1, 2, 3
)

// appendProtoExemplar appends an Exemplar message (without its tag and
// length) to b.
func appendProtoExemplar(b []byte, ex *exemplar) []byte {
	var hexBuf [32]byte
	label := func(b []byte, name string, id []byte) []byte {
		n := hex.Encode(hexBuf[:], id)
		b = protowire.AppendTag(b, pbExemplarLabel, protowire.BytesType)
		b = protowire.AppendVarint(b, uint64(protowire.SizeTag(pbLabelName)+protowire.SizeBytes(len(name))+protowire.SizeTag(pbLabelValue)+protowire.SizeBytes(n)))
		b = protowire.AppendTag(b, pbLabelName, protowire.BytesType)
		b = protowire.AppendString(b, name)
		b = protowire.AppendTag(b, pbLabelValue, protowire.BytesType)
		return protowire.AppendBytes(b, hexBuf[:n])
	}
	b = label(b, "trace_id", ex.traceID[:])
	if ex.hasSpan {
		b = label(b, "span_id", ex.spanID[:])
	}
	b = protowire.AppendTag(b, pbExemplarValue, protowire.Fixed64Type)
	b = protowire.AppendFixed64(b, math.Float64bits(ex.value()))
	return appendTimestamp(b, pbExTime, time.Unix(0, ex.unixNs))
}

// appendTimestamp appends a google.protobuf.Timestamp field, its zero
// fields left out as the protobuf encoder leaves them.
func appendTimestamp(b []byte, field protowire.Number, t time.Time) []byte {
	sec, nanos := t.Unix(), int64(t.Nanosecond())
	n := 0
	if sec != 0 {
		n += protowire.SizeTag(pbTimeSeconds) + protowire.SizeVarint(uint64(sec))
	}
	if nanos != 0 {
		n += protowire.SizeTag(pbTimeNanos) + protowire.SizeVarint(uint64(nanos))
	}
	b = protowire.AppendTag(b, field, protowire.BytesType)
	b = protowire.AppendVarint(b, uint64(n))
	if sec != 0 {
		b = protowire.AppendTag(b, pbTimeSeconds, protowire.VarintType)
		b = protowire.AppendVarint(b, uint64(sec))
	}
	if nanos != 0 {
		b = protowire.AppendTag(b, pbTimeNanos, protowire.VarintType)
		b = protowire.AppendVarint(b, uint64(nanos))
	}
	return b
}
