package otel

import (
	"context"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/spanwatch/spanwatch/emit"
)

// BenchmarkOnEnd measures the processor while no collector listens: OnEnd
// alone (one load and a branch, no allocation), and a whole span through
// the OpenTelemetry SDK with and without the processor, the comparison
// that says what adding it costs a service. Figures are in BENCHMARKS.md.
//
// A spanwatch collector anywhere on the host may uprobe this benchmark's
// marker (it scans /proc), which turns the disabled path into the enabled
// one. OnEnd, the disabled path alone, skips then; the whole-span
// benchmarks are named after the state they started in ("idle" or
// "listening": a collector attached, each span reaching the kernel).
func BenchmarkOnEnd(b *testing.B) {
	p := NewSpanProcessor(Config{Fold: []attribute.Key{"http.route"}})
	tp := sdktrace.NewTracerProvider()
	_, sp := tp.Tracer("bench").Start(context.Background(), "GET")
	sp.End()
	ro := sp.(sdktrace.ReadOnlySpan)
	b.Run("OnEnd", func(b *testing.B) {
		if emit.Enabled() {
			b.Skip("a spanwatch collector is listening: this is the disabled path's figure")
		}
		if p.always {
			b.Fatal("test hook set")
		}
		b.ReportAllocs()
		for i := 0; b.Loop(); i++ {
			p.OnEnd(ro)
			// A collector that attaches mid-run makes each call
			// ~1000x slower, and b.Loop has already planned for
			// the fast path: stop rather than run for an hour.
			if i&(1<<20-1) == 0 && emit.Enabled() {
				b.Skip("a spanwatch collector started listening during the run")
			}
		}
	})
	for _, tc := range []struct {
		name string
		opts []sdktrace.TracerProviderOption
	}{
		{"span/without", nil},
		// Any processor makes the SDK snapshot each ended span (one
		// allocation); a processor that does nothing shows that share.
		{"span/with-noop-processor", []sdktrace.TracerProviderOption{sdktrace.WithSpanProcessor(noop{})}},
		{"span/with", []sdktrace.TracerProviderOption{sdktrace.WithSpanProcessor(p)}},
	} {
		state := "idle"
		if emit.Enabled() {
			state = "listening"
		}
		b.Run(tc.name+"/"+state, func(b *testing.B) {
			tp := sdktrace.NewTracerProvider(tc.opts...)
			defer tp.Shutdown(context.Background())
			tr := tp.Tracer("bench")
			ctx := context.Background()
			b.ReportAllocs()
			for b.Loop() {
				_, sp := tr.Start(ctx, "GET")
				sp.SetAttributes(attribute.String("http.route", "/users/{id}"))
				sp.End()
			}
		})
	}
}

type noop struct{}

func (noop) OnStart(context.Context, sdktrace.ReadWriteSpan) {}
func (noop) OnEnd(sdktrace.ReadOnlySpan)                     {}
func (noop) Shutdown(context.Context) error                  { return nil }
func (noop) ForceFlush(context.Context) error                { return nil }
