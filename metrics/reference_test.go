package metrics

import (
	"math"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/spanwatch/spanwatch/snapshot"
)

// The exporter's span histograms as client_golang Metrics, the way the
// exporter built them before it wrote its families itself: the reference
// TestExpositionMatchesExpfmt holds the streaming encoder to.

// durationHistogram is one span series' cumulative latency histogram as a
// Prometheus metric. Its protobuf form carries both the native histogram
// (schema 6, the exact buckets) and the classic buckets; the text formats
// carry only the classic ones. A scraper that negotiates protobuf with
// native histograms enabled stores one series for it (and ignores the
// classic buckets unless told to keep them); other scrapers store one
// series per classic bucket, plus _sum and _count.
type durationHistogram struct {
	desc    *prometheus.Desc
	labels  []*dto.LabelPair
	count   uint64 // the histogram's total: the zero bucket plus every bucket
	sumSec  float64
	zero    uint64
	buckets []snapshot.Bucket // cumulative, sorted, positive buckets only
	// negative holds an argument metric's negative buckets (of |v|),
	// sorted by index; none for durations.
	negative []snapshot.Bucket
	classic  *classicBounds // nil: no classic buckets
	native   bool
	created  time.Time
	// exemplar, when set, is put where client_golang's
	// ObserveWithExemplar puts it: on the classic bucket its value falls
	// in (an explicit +Inf bucket above them all) and, for a native
	// histogram, in Histogram.Exemplars.
	exemplar *dto.Exemplar
}

func (h *durationHistogram) Desc() *prometheus.Desc { return h.desc }

func (h *durationHistogram) Write(m *dto.Metric) error {
	m.Label = h.labels
	hist := &dto.Histogram{
		SampleCount: proto.Uint64(h.count),
		SampleSum:   proto.Float64(h.sumSec),
	}
	if !h.created.IsZero() {
		hist.CreatedTimestamp = timestamppb.New(h.created)
	}
	if c := h.classic; c != nil {
		hist.Bucket = make([]*dto.Bucket, len(c.index))
		cum, j := h.zero, 0
		for k, idx := range c.index {
			for j < len(h.buckets) && h.buckets[j].Index <= idx {
				cum += h.buckets[j].Count
				j++
			}
			hist.Bucket[k] = &dto.Bucket{CumulativeCount: proto.Uint64(cum), UpperBound: proto.Float64(c.le[k])}
		}
	}
	if ex := h.exemplar; ex != nil {
		placed := false
		for _, b := range hist.Bucket {
			if ex.GetValue() <= b.GetUpperBound() {
				b.Exemplar, placed = ex, true
				break
			}
		}
		if !placed {
			hist.Bucket = append(hist.Bucket, &dto.Bucket{CumulativeCount: proto.Uint64(h.count), UpperBound: proto.Float64(math.Inf(+1)), Exemplar: ex})
		}
		if h.native {
			hist.Exemplars = []*dto.Exemplar{ex}
		}
	}
	if h.native {
		hist.Schema = proto.Int32(snapshot.HistSchema)
		// The zero bucket holds the spans of exactly 0 ns, the only
		// durations at or below client_golang's default threshold
		// (2^-128 s).
		hist.ZeroThreshold = proto.Float64(prometheus.DefNativeHistogramZeroThreshold)
		hist.ZeroCount = proto.Uint64(h.zero)
		hist.PositiveSpan, hist.PositiveDelta = spansAndDeltas(h.buckets)
		hist.NegativeSpan, hist.NegativeDelta = spansAndDeltas(h.negative)
		if len(hist.PositiveSpan) == 0 && len(hist.NegativeSpan) == 0 && h.zero == 0 {
			// An empty native histogram still says it is one.
			hist.PositiveSpan = []*dto.BucketSpan{{Offset: proto.Int32(0), Length: proto.Uint32(0)}}
		}
	}
	m.Histogram = hist
	return nil
}

// spansAndDeltas encodes sorted buckets as Prometheus' native histogram
// wire form: runs of consecutive indexes (spans; a span's offset is the gap
// from the end of the previous one, or the first index) and each bucket's
// count as the difference from the previous bucket's.
func spansAndDeltas(buckets []snapshot.Bucket) ([]*dto.BucketSpan, []int64) {
	if len(buckets) == 0 {
		return nil, nil
	}
	spans := make([]*dto.BucketSpan, 0, 4)
	deltas := make([]int64, len(buckets))
	var prevCount int64
	var cur *dto.BucketSpan
	next := int32(0) // the index after the end of the current span
	for k, b := range buckets {
		if cur == nil || b.Index != next {
			off := b.Index
			if cur != nil {
				off = b.Index - next
			}
			cur = &dto.BucketSpan{Offset: proto.Int32(off), Length: proto.Uint32(0)}
			spans = append(spans, cur)
		}
		*cur.Length++
		next = b.Index + 1
		deltas[k] = int64(b.Count) - prevCount
		prevCount = int64(b.Count)
	}
	return spans, deltas
}
