package otel

import (
	"context"
	"strings"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/spanwatch/spanwatch/emit"
	"github.com/spanwatch/spanwatch/snapshot"
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

// A SpanProcessor hands ended spans to spanwatch. It keeps nothing, so
// Shutdown and ForceFlush have nothing to do.
type SpanProcessor struct {
	fold  []attribute.Key
	name  func(sdktrace.ReadOnlySpan) string
	kinds uint32 // bit k set: pass trace.SpanKind(k); 0 passes all

	// Tests set record to see what would be sent (and always to send
	// while no collector listens); nil means emit.Record.
	record func(*emit.Finished)
	always bool
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

// OnStart does nothing: a span is recorded when it ends.
func (p *SpanProcessor) OnStart(context.Context, sdktrace.ReadWriteSpan) {}

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
	var name string
	switch {
	case p.name != nil:
		name = p.name(s)
		if name == "" {
			return
		}
	case len(p.fold) > 0:
		name = foldName(s.Name(), s.Attributes(), p.fold)
	default:
		name = s.Name()
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
			if v != "" && !strings.Contains(name, v) && len(out) < snapshot.NameLen {
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
