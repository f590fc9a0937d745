package metrics

import (
	"bufio"
	"compress/gzip"
	"io"
	"math"
	"net/http"
	"strconv"
	"strings"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"google.golang.org/protobuf/encoding/protowire"

	"github.com/spanwatch/spanwatch/snapshot"
)

// The span families are written straight from the newest view, series by
// series, into a 64 KiB buffer in front of the connection (and gzip when
// the scraper takes it): a scrape holds no copy of the series, and no
// client_golang Metric is built for them. The other metrics (the agent's
// counters, the Go runtime's) go through the registry and expfmt as
// usual, first. The formats are those Prometheus negotiates: protobuf
// (delimited, with native histograms), OpenMetrics 1.0 and 0.0.1 text,
// and the 0.0.4 text format; each span family is written exactly as
// expfmt would write the same family (TestExpositionMatchesExpfmt).

// acceptedFormats are the formats the handler serves, in its order of
// preference when a scraper accepts several equally.
var acceptedFormats = []expfmt.Format{expfmt.FmtOpenMetrics_1_0_0, expfmt.FmtOpenMetrics_0_0_1, expfmt.FmtProtoDelim, expfmt.FmtText}

// exposeBufferBytes is the write buffer between the encoder and the
// connection (or gzip).
const exposeBufferBytes = 64 << 10

var (
	bufPool  = sync.Pool{New: func() any { return bufio.NewWriterSize(nil, exposeBufferBytes) }}
	gzipPool = sync.Pool{New: func() any { w, _ := gzip.NewWriterLevel(nil, gzip.BestSpeed); return w }}
)

// family is one span family: its name, help, type, and which series it
// holds.
type family struct {
	name, help string
	typ        dto.MetricType
	// metric selects argument metric series (else span series).
	metric bool
	// value is a counter's or gauge's value; ok false leaves the series
	// out of the family.
	value func(*viewSeries) (v float64, ok bool)
	// classic says the histogram has the classic buckets.
	classic bool
	// split, when set, makes each series several samples, one a part,
	// told apart by one more label (the calls of NamesSpanmetrics, by
	// status_code); value is then unused.
	split []part
}

// A part is one sample of a split series: its label and value.
type part struct {
	label, value string
	v            func(*viewSeries) float64
}

func (e *Exporter) families() []family {
	if e.spanmetrics {
		return e.spanmetricsFamilies()
	}
	return []family{
		{name: "spanwatch_spans_total", help: "Spans that ended, per span name and cgroup.", typ: dto.MetricType_COUNTER,
			value: func(s *viewSeries) (float64, bool) { return float64(s.count), true }},
		{name: "spanwatch_span_errors_total", help: "Spans that ended with an error status.", typ: dto.MetricType_COUNTER,
			value: func(s *viewSeries) (float64, bool) { return float64(s.errors), true }},
		{name: "spanwatch_span_over_budget_total", help: "Spans slower than their budget.", typ: dto.MetricType_COUNTER,
			value: func(s *viewSeries) (float64, bool) { return float64(s.overBudget), true }},
		{name: "spanwatch_span_max_duration_seconds", help: "The longest span seen since the series began.", typ: dto.MetricType_GAUGE,
			value: func(s *viewSeries) (float64, bool) { return float64(s.maxNs) / 1e9, true }},
		{name: "spanwatch_span_budget_seconds", help: "The span's budget, when one is set.", typ: dto.MetricType_GAUGE,
			value: func(s *viewSeries) (float64, bool) { return float64(s.budgetNs) / 1e9, s.budgetNs > 0 }},
		{name: "spanwatch_span_duration_seconds", help: "Span durations: a native histogram of schema 6 (exactly spanwatch's buckets) " +
			"to scrapers that negotiate protobuf, and classic buckets whose le are boundaries of those buckets, so every count is exact.",
			typ: dto.MetricType_HISTOGRAM, classic: true},
		{name: "spanwatch_metric_values", help: "Argument metrics (metric: in a source; the span label names the metric): the values' count, " +
			"signed sum and, to scrapers that negotiate protobuf, a native histogram of schema 6 with negative buckets, exactly spanwatch's.",
			typ: dto.MetricType_HISTOGRAM, metric: true},
	}
}

// spanmetricsFamilies are the span families under NamesSpanmetrics: the
// calls by status code and the duration histogram take the spanmetrics
// connector's names; the others keep theirs.
func (e *Exporter) spanmetricsFamilies() []family {
	fs := []family{
		{name: "traces_span_metrics_calls_total", help: "Spans that ended (the OpenTelemetry Collector's spanmetrics calls), by status_code: STATUS_CODE_ERROR for those with an error status, STATUS_CODE_UNSET for the rest.",
			typ: dto.MetricType_COUNTER, split: []part{
				{label: spanmetricsStatus, value: "STATUS_CODE_UNSET", v: func(s *viewSeries) float64 { return float64(s.count - s.errors) }},
				{label: spanmetricsStatus, value: "STATUS_CODE_ERROR", v: func(s *viewSeries) float64 { return float64(s.errors) }},
			}},
	}
	for _, f := range (&Exporter{}).families() {
		switch f.name {
		case "spanwatch_spans_total", "spanwatch_span_errors_total":
			continue
		case "spanwatch_span_duration_seconds":
			f.name = "traces_span_metrics_duration_seconds"
			f.help = "Span durations (the spanmetrics connector's duration, in seconds, over every status): a native histogram of schema 6 (exactly spanwatch's buckets) " +
				"to scrapers that negotiate protobuf, and classic buckets whose le are boundaries of those buckets."
		}
		fs = append(fs, f)
	}
	return fs
}

// labelName is the exported name of a series label.
func (x *exposer) labelName(n string) string {
	if x.e.spanmetrics {
		if m, ok := spanmetricsLabels[n]; ok {
			return m
		}
	}
	return n
}

// Handler returns the /metrics HTTP handler.
func (e *Exporter) Handler() http.Handler {
	return http.HandlerFunc(e.serveMetrics)
}

func (e *Exporter) serveMetrics(w http.ResponseWriter, r *http.Request) {
	mfs, err := e.reg.Gather()
	if err != nil {
		// As promhttp's ContinueOnError: serve what was gathered.
		e.log.Warn("metrics_gather_failed", "error", err)
	}
	format := expfmt.NegotiateAccept(r.Header, acceptedFormats...)
	w.Header().Set("Content-Type", string(format))
	w.Header().Add("Vary", "Accept")
	w.Header().Add("Vary", "Accept-Encoding")
	var out io.Writer = w
	if gzipAccepted(r.Header.Get("Accept-Encoding")) {
		w.Header().Set("Content-Encoding", "gzip")
		gz := gzipPool.Get().(*gzip.Writer)
		gz.Reset(w)
		defer func() { gz.Close(); gzipPool.Put(gz) }()
		out = gz
	}
	bw := bufPool.Get().(*bufio.Writer)
	bw.Reset(out)
	defer func() { bw.Reset(nil); bufPool.Put(bw) }()

	var filter map[string]bool
	if r.URL != nil {
		if names := r.URL.Query()["name[]"]; len(names) > 0 {
			filter = map[string]bool{}
			for _, n := range names {
				filter[n] = true
			}
		}
	}
	enc := expfmt.NewEncoder(bw, format)
	for _, mf := range mfs {
		if filter != nil && !filter[mf.GetName()] {
			continue
		}
		if err := enc.Encode(mf); err != nil {
			e.log.Debug("metrics_write_failed", "error", err)
			return
		}
	}
	x := exposer{w: bw, e: e, v: e.view.Load(), kind: kindOf(format)}
	for _, f := range e.families() {
		if filter != nil && !filter[f.name] {
			continue
		}
		x.family(&f)
		if x.err != nil {
			e.log.Debug("metrics_write_failed", "error", x.err)
			return
		}
	}
	if c, ok := enc.(expfmt.Closer); ok {
		c.Close() // OpenMetrics' "# EOF"
	}
	if err := bw.Flush(); err != nil {
		e.log.Debug("metrics_write_failed", "error", err)
	}
}

// gzipAccepted says whether an Accept-Encoding header takes gzip.
func gzipAccepted(h string) bool {
	for _, part := range strings.Split(h, ",") {
		name, params, _ := strings.Cut(strings.TrimSpace(part), ";")
		if strings.TrimSpace(name) != "gzip" {
			continue
		}
		if q, ok := strings.CutPrefix(strings.TrimSpace(params), "q="); ok {
			if v, err := strconv.ParseFloat(q, 64); err == nil && v == 0 {
				return false
			}
		}
		return true
	}
	return false
}

type exposeKind int

const (
	kindText exposeKind = iota
	kindOpenMetrics
	kindProto
)

func kindOf(f expfmt.Format) exposeKind {
	switch f.FormatType() {
	case expfmt.TypeProtoDelim:
		return kindProto
	case expfmt.TypeOpenMetrics:
		return kindOpenMetrics
	}
	return kindText
}

// exposer writes span families from one view.
type exposer struct {
	w    *bufio.Writer
	e    *Exporter
	v    *view
	kind exposeKind
	err  error
	lbl  []byte // the current series' labels, rendered
	buf  []byte // a text line
	hdr  []byte // a protobuf family's header
	pb   []byte // a protobuf metric
	hb   []byte // a protobuf histogram
	eb   []byte // a protobuf exemplar
}

func (x *exposer) write(b []byte) {
	if x.err == nil {
		_, x.err = x.w.Write(b)
	}
}

func (x *exposer) selects(f *family, s *viewSeries) bool {
	if s.meta.metric != f.metric {
		return false
	}
	if f.value != nil {
		_, ok := f.value(s)
		return ok
	}
	return true
}

// family writes one family; nothing when it holds no series.
func (x *exposer) family(f *family) {
	any := false
	for i := range x.v.series {
		if x.selects(f, &x.v.series[i]) {
			any = true
			break
		}
	}
	if !any {
		return
	}
	if x.kind == kindProto {
		x.protoFamily(f)
		return
	}
	x.textHeader(f)
	for i := range x.v.series {
		s := &x.v.series[i]
		if !x.selects(f, s) {
			continue
		}
		x.textLabels(s.meta)
		if f.typ == dto.MetricType_HISTOGRAM {
			x.textHistogram(f, s)
			continue
		}
		if f.split != nil {
			n := len(x.lbl)
			for _, p := range f.split {
				x.lbl = x.appendLabel(x.lbl[:n], p.label, p.value)
				x.textSample(f.name, "", "", 0, p.v(s))
			}
			continue
		}
		v, _ := f.value(s)
		x.textSample(f.name, "", "", 0, v)
		if x.err != nil {
			return
		}
	}
}

// omName is the name of a family's metadata lines: OpenMetrics names a
// counter without its _total.
func (x *exposer) omName(f *family) string {
	if x.kind == kindOpenMetrics && f.typ == dto.MetricType_COUNTER {
		return strings.TrimSuffix(f.name, "_total")
	}
	return f.name
}

func (x *exposer) textHeader(f *family) {
	b := x.buf[:0]
	name := x.omName(f)
	var typ string
	switch f.typ {
	case dto.MetricType_COUNTER:
		typ = "counter"
	case dto.MetricType_GAUGE:
		typ = "gauge"
	default:
		typ = "histogram"
	}
	if x.kind == kindOpenMetrics {
		b = append(append(append(append(b, "# HELP "...), name...), ' '), escape(f.help, true)...)
		b = append(append(append(append(b, "\n# TYPE "...), name...), ' '), typ...)
	} else {
		b = append(append(append(append(b, "# HELP "...), name...), ' '), escape(f.help, false)...)
		b = append(append(append(append(b, "\n# TYPE "...), name...), ' '), typ...)
	}
	b = append(b, '\n')
	x.buf = b
	x.write(b)
}

// textLabels renders a series' labels, without the closing brace, into
// x.lbl ("" for none).
func (x *exposer) textLabels(m *seriesMeta) {
	b := x.lbl[:0]
	for i, n := range m.names {
		b = x.appendLabel(b, x.labelName(n), m.values[i])
	}
	x.lbl = b
}

// appendLabel appends name="value" to rendered labels b (without their
// closing brace).
func (x *exposer) appendLabel(b []byte, name, value string) []byte {
	if len(b) == 0 {
		b = append(b, '{')
	} else {
		b = append(b, ',')
	}
	b = append(append(append(b, name...), `="`...), escape(value, true)...)
	return append(b, '"')
}

// textSample writes one line: name+suffix, the labels, an extra label
// (le) when extra is set, and the value.
func (x *exposer) textSample(name, suffix, extra string, extraVal float64, v float64) {
	x.textSampleFn(name, suffix, extra, extraVal, func(b []byte) []byte { return x.appendFloat(b, v) }, nil)
}

// textSampleFn writes one line as textSample, its value written by
// value, and ex, when not nil, as its exemplar.
func (x *exposer) textSampleFn(name, suffix, extra string, extraVal float64, value func([]byte) []byte, ex *exemplar) {
	b := append(append(x.buf[:0], name...), suffix...)
	b = append(b, x.lbl...)
	switch {
	case extra != "":
		if len(x.lbl) == 0 {
			b = append(b, '{')
		} else {
			b = append(b, ',')
		}
		b = append(append(b, extra...), `="`...)
		b = x.appendFloat(b, extraVal)
		b = append(b, `"}`...)
	case len(x.lbl) > 0:
		b = append(b, '}')
	}
	b = append(b, ' ')
	b = value(b)
	if ex != nil {
		b = x.appendTextExemplar(b, ex)
	}
	b = append(b, '\n')
	x.buf = b
	x.write(b)
}

// appendFloat formats a value as expfmt does: OpenMetrics always with a
// decimal point or exponent.
func (x *exposer) appendFloat(b []byte, f float64) []byte {
	switch {
	case math.IsNaN(f):
		return append(b, "NaN"...)
	case math.IsInf(f, +1):
		return append(b, "+Inf"...)
	case math.IsInf(f, -1):
		return append(b, "-Inf"...)
	}
	start := len(b)
	b = strconv.AppendFloat(b, f, 'g', -1, 64)
	if x.kind == kindOpenMetrics && !strings.ContainsAny(string(b[start:]), "e.") {
		b = append(b, '.', '0')
	}
	return b
}

func appendUint(b []byte, n uint64) []byte { return strconv.AppendUint(b, n, 10) }

// textHistogram writes a histogram's classic buckets, +Inf, _sum and
// _count.
func (x *exposer) textHistogram(f *family, s *viewSeries) {
	total := x.histTotal(s)
	count := func(n uint64) func([]byte) []byte {
		if x.kind == kindOpenMetrics {
			return func(b []byte) []byte { return appendUint(b, n) }
		}
		return func(b []byte) []byte { return x.appendFloat(b, float64(n)) }
	}
	ex, exAt := x.exemplar(f, s)
	if x.kind != kindOpenMetrics {
		ex = nil // the 0.0.4 text format has no exemplars
	}
	at := func(k int) *exemplar {
		if k == exAt {
			return ex
		}
		return nil
	}
	k := 0
	if c := x.e.classic; f.classic && c != nil {
		it := x.v.iter(s.hist)
		cum, more := s.zero, it.Next()
		for idx := range c.index {
			for more && it.idx <= c.index[idx] {
				cum += it.cnt
				more = it.Next()
			}
			x.textSampleFn(f.name, "_bucket", "le", c.le[idx], count(cum), at(idx))
		}
		k = len(c.index)
	}
	x.textSampleFn(f.name, "_bucket", "le", math.Inf(+1), count(total), at(k))
	x.textSample(f.name, "_sum", "", 0, x.histSum(s))
	x.textSampleFn(f.name, "_count", "", 0, count(total), nil)
}

// exemplar returns a histogram series' exemplar, if it has one, and the
// classic bucket it goes on (len(bounds) for +Inf).
func (x *exposer) exemplar(f *family, s *viewSeries) (*exemplar, int) {
	if s.ex == 0 || !f.classic {
		return nil, -1
	}
	ex := &x.v.exemplars[s.ex-1]
	return ex, ex.classicBucket(x.e.classic)
}

// histTotal is a histogram's count: its buckets' total, so that the +Inf
// bucket and _count agree even if a window's Count and histogram differ.
func (x *exposer) histTotal(s *viewSeries) uint64 {
	total := s.zero
	for _, r := range [2]packedRef{s.hist, s.neg} {
		it := x.v.iter(r)
		for it.Next() {
			total += it.cnt
		}
	}
	return total
}

func (x *exposer) histSum(s *viewSeries) float64 {
	if s.meta.metric {
		return float64(s.sumVal)
	}
	return float64(s.sumNs) / 1e9
}

// escape escapes a HELP text or (quoted) a label value as the text
// formats want: backslash and newline, and double quotes in quoted ones.
func escape(s string, quoted bool) string {
	if !strings.ContainsAny(s, "\\\n\"") {
		return s
	}
	if quoted {
		return quotedEscaper.Replace(s)
	}
	return escaper.Replace(s)
}

var (
	escaper       = strings.NewReplacer("\\", `\\`, "\n", `\n`)
	quotedEscaper = strings.NewReplacer("\\", `\\`, "\n", `\n`, "\"", `\"`)
)

// Protobuf: io.prometheus.client.MetricFamily, length-delimited. The
// length comes first, so each family is walked twice over the same
// immutable view: once to size it, once to write it.

// Field numbers of io.prometheus.client's messages (metrics.proto).
const (
	pbFamilyName, pbFamilyHelp, pbFamilyType, pbFamilyMetric = 1, 2, 3, 4
	pbMetricLabel, pbMetricGauge, pbMetricCounter            = 1, 2, 3
	pbMetricHistogram                                        = 7
	pbLabelName, pbLabelValue                                = 1, 2
	pbValue                                                  = 1 // Counter.value, Gauge.value
	pbHistCount, pbHistSum, pbHistBucket                     = 1, 2, 3
	pbHistSchema, pbHistZeroThreshold, pbHistZeroCount       = 5, 6, 7
	pbHistNegSpan, pbHistNegDelta                            = 9, 10
	pbHistPosSpan, pbHistPosDelta                            = 12, 13
	pbHistCreated                                            = 15
	pbBucketCount, pbBucketBound                             = 1, 2
	pbSpanOffset, pbSpanLength                               = 1, 2
	pbTimeSeconds, pbTimeNanos                               = 1, 2
)

func (x *exposer) protoFamily(f *family) {
	hdr := x.hdr[:0]
	hdr = protowire.AppendTag(hdr, pbFamilyName, protowire.BytesType)
	hdr = protowire.AppendString(hdr, f.name)
	hdr = protowire.AppendTag(hdr, pbFamilyHelp, protowire.BytesType)
	hdr = protowire.AppendString(hdr, f.help)
	hdr = protowire.AppendTag(hdr, pbFamilyType, protowire.VarintType)
	hdr = protowire.AppendVarint(hdr, uint64(f.typ))
	size := len(hdr)
	parts := max(1, len(f.split))
	for i := range x.v.series {
		s := &x.v.series[i]
		if !x.selects(f, s) {
			continue
		}
		for p := range parts {
			m := x.protoMetric(f, s, p)
			size += protowire.SizeTag(pbFamilyMetric) + protowire.SizeBytes(len(m))
		}
	}
	var pre [binaryMaxVarint]byte
	x.write(protowire.AppendVarint(pre[:0], uint64(size)))
	x.write(hdr)
	x.hdr = hdr
	for i := range x.v.series {
		s := &x.v.series[i]
		if !x.selects(f, s) {
			continue
		}
		for p := range parts {
			m := x.protoMetric(f, s, p)
			t := protowire.AppendTag(pre[:0], pbFamilyMetric, protowire.BytesType)
			t = protowire.AppendVarint(t, uint64(len(m)))
			x.write(t)
			x.write(m)
		}
		if x.err != nil {
			return
		}
	}
}

const binaryMaxVarint = 20

// protoMetric encodes one Metric into x.pb: part p of a split series, or
// the series.
func (x *exposer) protoMetric(f *family, s *viewSeries, p int) []byte {
	b := x.pb[:0]
	label := func(n, v string) {
		b = protowire.AppendTag(b, pbMetricLabel, protowire.BytesType)
		b = protowire.AppendVarint(b, uint64(protowire.SizeTag(pbLabelName)+protowire.SizeBytes(len(n))+protowire.SizeTag(pbLabelValue)+protowire.SizeBytes(len(v))))
		b = protowire.AppendTag(b, pbLabelName, protowire.BytesType)
		b = protowire.AppendString(b, n)
		b = protowire.AppendTag(b, pbLabelValue, protowire.BytesType)
		b = protowire.AppendString(b, v)
	}
	for i, n := range s.meta.names {
		label(x.labelName(n), s.meta.values[i])
	}
	if f.split != nil {
		label(f.split[p].label, f.split[p].value)
	}
	switch f.typ {
	case dto.MetricType_COUNTER, dto.MetricType_GAUGE:
		var v float64
		if f.split != nil {
			v = f.split[p].v(s)
		} else {
			v, _ = f.value(s)
		}
		field := protowire.Number(pbMetricCounter)
		if f.typ == dto.MetricType_GAUGE {
			field = pbMetricGauge
		}
		b = protowire.AppendTag(b, field, protowire.BytesType)
		b = protowire.AppendVarint(b, uint64(protowire.SizeTag(pbValue)+protowire.SizeFixed64()))
		b = protowire.AppendTag(b, pbValue, protowire.Fixed64Type)
		b = protowire.AppendFixed64(b, math.Float64bits(v))
	default:
		h := x.protoHistogram(f, s)
		b = protowire.AppendTag(b, pbMetricHistogram, protowire.BytesType)
		b = protowire.AppendBytes(b, h)
	}
	x.pb = b
	return b
}

// protoHistogram encodes a Histogram message into x.hb.
func (x *exposer) protoHistogram(f *family, s *viewSeries) []byte {
	h := x.hb[:0]
	total := x.histTotal(s)
	h = protowire.AppendTag(h, pbHistCount, protowire.VarintType)
	h = protowire.AppendVarint(h, total)
	h = protowire.AppendTag(h, pbHistSum, protowire.Fixed64Type)
	h = protowire.AppendFixed64(h, math.Float64bits(x.histSum(s)))
	ex, exAt := x.exemplar(f, s)
	var exMsg []byte
	if ex != nil {
		x.eb = appendProtoExemplar(x.eb[:0], ex)
		exMsg = x.eb
	}
	bucket := func(h []byte, cum uint64, le float64, withEx bool) []byte {
		n := protowire.SizeTag(pbBucketCount) + protowire.SizeVarint(cum) + protowire.SizeTag(pbBucketBound) + protowire.SizeFixed64()
		if withEx {
			n += protowire.SizeTag(pbBucketExemplar) + protowire.SizeBytes(len(exMsg))
		}
		h = protowire.AppendTag(h, pbHistBucket, protowire.BytesType)
		h = protowire.AppendVarint(h, uint64(n))
		h = protowire.AppendTag(h, pbBucketCount, protowire.VarintType)
		h = protowire.AppendVarint(h, cum)
		h = protowire.AppendTag(h, pbBucketBound, protowire.Fixed64Type)
		h = protowire.AppendFixed64(h, math.Float64bits(le))
		if withEx {
			h = protowire.AppendTag(h, pbBucketExemplar, protowire.BytesType)
			h = protowire.AppendBytes(h, exMsg)
		}
		return h
	}
	k := 0
	if c := x.e.classic; f.classic && c != nil {
		it := x.v.iter(s.hist)
		cum, more := s.zero, it.Next()
		for idx := range c.index {
			for more && it.idx <= c.index[idx] {
				cum += it.cnt
				more = it.Next()
			}
			h = bucket(h, cum, c.le[idx], ex != nil && idx == exAt)
		}
		k = len(c.index)
	}
	if ex != nil && exAt == k {
		// Above every bound: on an explicit +Inf bucket, as
		// client_golang puts it.
		h = bucket(h, total, math.Inf(+1), true)
	}
	if x.e.native {
		h = protowire.AppendTag(h, pbHistSchema, protowire.VarintType)
		h = protowire.AppendVarint(h, protowire.EncodeZigZag(snapshot.HistSchema))
		h = protowire.AppendTag(h, pbHistZeroThreshold, protowire.Fixed64Type)
		h = protowire.AppendFixed64(h, math.Float64bits(prometheus.DefNativeHistogramZeroThreshold))
		h = protowire.AppendTag(h, pbHistZeroCount, protowire.VarintType)
		h = protowire.AppendVarint(h, s.zero)
		if s.neg.n > 0 {
			h = x.appendSpans(h, pbHistNegSpan, pbHistNegDelta, s.neg)
		}
		if s.hist.n > 0 {
			h = x.appendSpans(h, pbHistPosSpan, pbHistPosDelta, s.hist)
		} else if s.neg.n == 0 && s.zero == 0 {
			// An empty native histogram still says it is one: one
			// span of length 0.
			h = protowire.AppendTag(h, pbHistPosSpan, protowire.BytesType)
			h = protowire.AppendVarint(h, uint64(protowire.SizeTag(pbSpanOffset)+1+protowire.SizeTag(pbSpanLength)+1))
			h = protowire.AppendTag(h, pbSpanOffset, protowire.VarintType)
			h = protowire.AppendVarint(h, 0)
			h = protowire.AppendTag(h, pbSpanLength, protowire.VarintType)
			h = protowire.AppendVarint(h, 0)
		}
	}
	if c := s.meta.created; !c.IsZero() {
		h = appendTimestamp(h, pbHistCreated, c)
	}
	if ex != nil && x.e.native {
		h = protowire.AppendTag(h, pbHistExemplars, protowire.BytesType)
		h = protowire.AppendBytes(h, exMsg)
	}
	x.hb = h
	return h
}

// appendSpans encodes packed buckets as a native histogram's spans and
// deltas: runs of consecutive indexes (a span's offset is its gap from
// the end of the one before, or the first index) and each count as its
// difference from the previous bucket's.
func (x *exposer) appendSpans(h []byte, spanField, deltaField protowire.Number, r packedRef) []byte {
	it := x.v.iter(r)
	var next, off int32
	var length uint32
	first := true
	flush := func() {
		h = protowire.AppendTag(h, spanField, protowire.BytesType)
		zz := protowire.EncodeZigZag(int64(off))
		h = protowire.AppendVarint(h, uint64(protowire.SizeTag(pbSpanOffset)+protowire.SizeVarint(zz)+protowire.SizeTag(pbSpanLength)+protowire.SizeVarint(uint64(length))))
		h = protowire.AppendTag(h, pbSpanOffset, protowire.VarintType)
		h = protowire.AppendVarint(h, zz)
		h = protowire.AppendTag(h, pbSpanLength, protowire.VarintType)
		h = protowire.AppendVarint(h, uint64(length))
	}
	for it.Next() {
		switch {
		case first:
			off, length, first = it.idx, 1, false
		case it.idx != next:
			flush()
			off, length = it.idx-next, 1
		default:
			length++
		}
		next = it.idx + 1
	}
	flush()
	// The deltas, packed: their size first.
	n := 0
	var prev int64
	it = x.v.iter(r)
	for it.Next() {
		n += protowire.SizeVarint(protowire.EncodeZigZag(int64(it.cnt) - prev))
		prev = int64(it.cnt)
	}
	h = protowire.AppendTag(h, deltaField, protowire.BytesType)
	h = protowire.AppendVarint(h, uint64(n))
	prev = 0
	it = x.v.iter(r)
	for it.Next() {
		h = protowire.AppendVarint(h, protowire.EncodeZigZag(int64(it.cnt)-prev))
		prev = int64(it.cnt)
	}
	return h
}
