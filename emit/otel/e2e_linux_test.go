//go:build linux

package otel

import (
	"context"
	"os"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/spanwatch/spanwatch/collector"
	"github.com/spanwatch/spanwatch/emit"
	"github.com/spanwatch/spanwatch/snapshot"
)

// TestThroughBPF sends OpenTelemetry spans through the real processor, the
// span SDK and the kernel: the collector's snapshot counts them, and the
// overrun of a span slower than its budget carries the trace id the
// OpenTelemetry SDK reported for it.
func TestThroughBPF(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root (CAP_BPF, CAP_PERFMON) to load BPF")
	}
	if emit.Mode() != "marker" {
		t.Skipf("the span SDK uses %s here, not the marker (the VM tests cover user_events)", emit.Mode())
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	c, err := collector.New(context.Background(), collector.Config{
		Sources:        collector.Sources{Marker: true},
		ScanInterval:   -1,
		MarkerBinaries: []string{exe},
	})
	if err != nil {
		t.Fatalf("collector: %v", err)
	}
	defer c.Close()
	if !emit.Enabled() {
		t.Fatal("the collector attached but emit is not enabled")
	}
	if err := c.SetBudgets([]collector.BudgetRule{{Span: "GET /slow", Budget: 20 * time.Millisecond}}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Snapshot(); err != nil { // a fresh window
		t.Fatal(err)
	}

	sr := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(
		sdktrace.WithSpanProcessor(NewSpanProcessor(Config{Fold: []attribute.Key{"http.route"}})),
		sdktrace.WithSpanProcessor(sr),
	)
	defer tp.Shutdown(context.Background())
	tr := tp.Tracer("e2e")
	request := func(route string, d time.Duration, fail bool) {
		_, sp := tr.Start(context.Background(), "GET", trace.WithSpanKind(trace.SpanKindServer))
		sp.SetAttributes(attribute.String("http.route", route))
		time.Sleep(d)
		if fail {
			sp.SetStatus(codes.Error, "boom")
		}
		sp.End()
	}
	for i := 0; i < 20; i++ {
		request("/fast", 0, i%5 == 0)
	}
	request("/slow", 50*time.Millisecond, false)

	var slowTrace string
	for _, s := range sr.Ended() {
		for _, kv := range s.Attributes() {
			if kv.Key == "http.route" && kv.Value.AsString() == "/slow" {
				slowTrace = s.SpanContext().TraceID().String()
			}
		}
	}
	series := map[string]snapshot.Series{}
	var overruns []snapshot.Overrun
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) && (series["GET /fast"].Count < 20 || len(overruns) == 0) {
		time.Sleep(50 * time.Millisecond)
		s, err := c.Snapshot()
		if err != nil {
			t.Fatal(err)
		}
		for _, x := range s.Series {
			cur := series[x.Span]
			cur.Span, cur.Count, cur.Errors, cur.OverBudget = x.Span, cur.Count+x.Count, cur.Errors+x.Errors, cur.OverBudget+x.OverBudget
			series[x.Span] = cur
		}
		for _, ov := range s.Overruns {
			// A sample of the span while it ran past its budget (the
			// in-flight sampler, when the machine stretched the 50 ms
			// past a sampling tick) is reported too, as still running:
			// the span's end is the one overrun this test asks for.
			if !ov.StillRunning {
				overruns = append(overruns, ov)
			}
		}
	}
	if f := series["GET /fast"]; f.Count != 20 || f.Errors != 4 {
		t.Errorf("GET /fast: count %d errors %d, want 20 and 4", f.Count, f.Errors)
	}
	if s := series["GET /slow"]; s.Count != 1 || s.OverBudget != 1 {
		t.Errorf("GET /slow: count %d over budget %d, want 1 and 1", s.Count, s.OverBudget)
	}
	if len(overruns) != 1 {
		t.Fatalf("%d overruns, want 1", len(overruns))
	}
	ov := overruns[0]
	if ov.Span != "GET /slow" || ov.TraceID != slowTrace || ov.DurationNs < uint64(50*time.Millisecond) {
		t.Fatalf("overrun span %q trace %q duration %d; want GET /slow, trace %s (OpenTelemetry's), >= 50ms", ov.Span, ov.TraceID, ov.DurationNs, slowTrace)
	}
	t.Logf("overrun of GET /slow: trace %s, %d frames of user stack", ov.TraceID, len(ov.UserStack))
}
