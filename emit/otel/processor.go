package otel

import (
	"context"
	"encoding/binary"
	"strings"
	"sync/atomic"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/spanwatch/spanwatch/emit"
	"github.com/spanwatch/spanwatch/internal/spanevent"
)

// Config configures a SpanProcessor. The zero value passes every span with
// its own name.
type Config struct {
	// Fold lists attributes whose values are appended to the span name,
	// separated by a space, in order, when the span has them and the name
	// does not already contain the value: with Fold [http.route], a span
	// "GET" with http.route "/users/{id}" becomes "GET /users/{id}". Fold
	// only low-cardinality attributes: every distinct name is a series.
	Fold []attribute.Key
	// Name, when set, names each span instead (Fold is then ignored).
	// Returning "" drops the span.
	Name func(s sdktrace.ReadOnlySpan) string
	// Kinds, when not empty, passes only spans of these kinds (say
	// trace.SpanKindServer, to watch requests and not their internals).
	Kinds []trace.SpanKind
}

// A SpanProcessor hands spans to spanwatch: their start (so that spanwatch
// samples a span while it runs past its budget, on whatever thread its
// goroutine runs) and their end. It keeps no spans, so Shutdown and
// ForceFlush have nothing to do.
//
// A span is watched while it runs by the name it has when it starts: a
// name completed later (Fold of an attribute set during the span, such as
// otelhttp's http.route, or a span renamed with SetName) is judged by the
// budget of its start name while it runs, and by its final name when it
// ends.
type SpanProcessor struct {
	fold  []attribute.Key
	name  func(sdktrace.ReadOnlySpan) string
	kinds uint32 // bit k set: pass trace.SpanKind(k); 0 passes all

	// starts remembers the goroutine each span started on, by span id,
	// for spans that end on another goroutine: a fixed table, no
	// allocation; a collision only loses that (see OnEnd).
	starts [startSlots]startSlot

	// Tests set record and started to see what would be sent (and always
	// to send while no collector listens); nil means emit.Record and
	// emit.Started.
	record  func(*emit.Finished)
	started func(*emit.Finished) uint64
	always  bool
}

const startSlots = 4096

type startSlot struct {
	span atomic.Uint64 // the span id
	g    atomic.Uint64 // emit.Started's goroutine id
}

var _ sdktrace.SpanProcessor = (*SpanProcessor)(nil)

// NewSpanProcessor returns a SpanProcessor for cfg.
func NewSpanProcessor(cfg Config) *SpanProcessor {
	p := &SpanProcessor{fold: cfg.Fold, name: cfg.Name}
	for _, k := range cfg.Kinds {
		if k >= 0 && k < 32 {
			p.kinds |= 1 << uint(k)
		}
	}
	return p
}

// OnStart tells spanwatch the span began; while no collector listens it
// costs one load and a branch.
func (p *SpanProcessor) OnStart(_ context.Context, s sdktrace.ReadWriteSpan) {
	if !emit.Enabled() && !p.always {
		return
	}
	p.start(s)
}

// start is OnStart's enabled path.
func (p *SpanProcessor) start(s sdktrace.ReadWriteSpan) {
	if p.kinds != 0 && p.kinds&(1<<uint(s.SpanKind())) == 0 {
		return
	}
	name := p.spanName(s)
	if name == "" {
		return
	}
	sc := s.SpanContext()
	// With Fold, the name may grow when the span ends (an attribute set
	// during the span, such as otelhttp's http.route).
	f := emit.Finished{Name: name, Start: s.StartTime(), TraceID: sc.TraceID(), SpanID: sc.SpanID(),
		NamePrefix: p.name == nil && len(p.fold) > 0}
	var g uint64
	if p.started != nil {
		g = p.started(&f)
	} else {
		g = emit.Started(&f)
	}
	if g != 0 {
		id := spanKey(f.SpanID)
		slot := &p.starts[id%startSlots]
		slot.g.Store(g)
		slot.span.Store(id)
	}
}

func spanKey(id [8]byte) uint64 { return binary.LittleEndian.Uint64(id[:]) | 1 }

// spanName is the name the span is sent with, "" to drop it.
func (p *SpanProcessor) spanName(s sdktrace.ReadOnlySpan) string {
	switch {
	case p.name != nil:
		return p.name(s)
	case len(p.fold) > 0:
		return foldName(s.Name(), s.Attributes(), p.fold)
	}
	return s.Name()
}

// OnEnd records the span through emit.
func (p *SpanProcessor) OnEnd(s sdktrace.ReadOnlySpan) {
	if !emit.Enabled() && !p.always {
		return
	}
	p.send(s)
}

// send is OnEnd's enabled path, kept apart so OnEnd stays small enough to
// inline the disabled check into callers that devirtualize it.
func (p *SpanProcessor) send(s sdktrace.ReadOnlySpan) {
	if p.kinds != 0 && p.kinds&(1<<uint(s.SpanKind())) == 0 {
		return
	}
	name := p.spanName(s)
	if name == "" {
		return
	}
	start := s.StartTime()
	sc := s.SpanContext()
	f := emit.Finished{
		Name:     name,
		Start:    start,
		Duration: s.EndTime().Sub(start),
		Error:    s.Status().Code == codes.Error,
		TraceID:  sc.TraceID(),
		SpanID:   sc.SpanID(),
	}
	// The goroutine the span started on, if it ends on another: its start
	// is kept there. A lost slot (a collision) leaves the start open on
	// its goroutine until that goroutine's next span ends over it.
	id := spanKey(f.SpanID)
	if slot := &p.starts[id%startSlots]; slot.span.Load() == id {
		f.Goroutine = slot.g.Load()
	}
	if p.record != nil {
		p.record(&f)
		return
	}
	emit.Record(&f)
}

// foldName appends the values of the fold attributes to name, stopping at
// the NameLen bytes that emit keeps.
func foldName(name string, attrs []attribute.KeyValue, fold []attribute.Key) string {
	out := name
	for _, k := range fold {
		for _, kv := range attrs {
			if kv.Key != k {
				continue
			}
			v := kv.Value.Emit()
			if v != "" && !strings.Contains(name, v) && len(out) < spanevent.NameLen {
				out += " " + v
			}
			break
		}
	}
	return out
}

// Shutdown does nothing: the processor holds no state.
func (p *SpanProcessor) Shutdown(context.Context) error { return nil }

// ForceFlush does nothing: every span is handed over as it ends.
func (p *SpanProcessor) ForceFlush(context.Context) error { return nil }
