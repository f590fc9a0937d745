package otel

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/spanwatch/spanwatch/emit"
)

// recorder collects what the processor would hand to emit.
type recorder struct {
	mu  sync.Mutex
	got []emit.Finished
}

func (r *recorder) record(f *emit.Finished) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.got = append(r.got, *f)
}

// newProvider returns a tracer provider with p (sending even while no
// collector listens) and a span recorder holding what OpenTelemetry itself
// reports, to compare against.
func newProvider(t *testing.T, p *SpanProcessor) (*sdktrace.TracerProvider, *recorder, *tracetest.SpanRecorder) {
	rec := &recorder{}
	p.record, p.always = rec.record, true
	sr := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(p), sdktrace.WithSpanProcessor(sr))
	t.Cleanup(func() { tp.Shutdown(context.Background()) })
	return tp, rec, sr
}

func TestOnEndSendsWhatOpenTelemetryReports(t *testing.T) {
	tp, rec, sr := newProvider(t, NewSpanProcessor(Config{}))
	tr := tp.Tracer("test")
	ctx, parent := tr.Start(context.Background(), "checkout", trace.WithSpanKind(trace.SpanKindServer))
	_, child := tr.Start(ctx, "db.query")
	time.Sleep(2 * time.Millisecond)
	child.RecordError(errors.New("deadlock"))
	child.SetStatus(codes.Error, "deadlock")
	child.End()
	parent.End()

	ended := sr.Ended()
	if len(rec.got) != 2 || len(ended) != 2 {
		t.Fatalf("sent %d spans, OpenTelemetry ended %d; want 2 and 2", len(rec.got), len(ended))
	}
	for i, want := range ended {
		got := rec.got[i]
		if got.Name != want.Name() {
			t.Errorf("span %d: name %q, want %q", i, got.Name, want.Name())
		}
		if d := want.EndTime().Sub(want.StartTime()); got.Duration != d || !got.Start.Equal(want.StartTime()) {
			t.Errorf("span %d: start %v duration %v, want %v and %v", i, got.Start, got.Duration, want.StartTime(), d)
		}
		if got.TraceID != want.SpanContext().TraceID() || got.SpanID != want.SpanContext().SpanID() {
			t.Errorf("span %d: ids %x/%x, want %s/%s", i, got.TraceID, got.SpanID, want.SpanContext().TraceID(), want.SpanContext().SpanID())
		}
		if wantErr := want.Status().Code == codes.Error; got.Error != wantErr {
			t.Errorf("span %d: error %v, want %v", i, got.Error, wantErr)
		}
	}
	if rec.got[0].Name != "db.query" || !rec.got[0].Error || rec.got[0].Duration < 2*time.Millisecond {
		t.Errorf("child span sent as %+v", rec.got[0])
	}
	if rec.got[0].TraceID != rec.got[1].TraceID {
		t.Error("parent and child carry different trace ids")
	}
}

func TestNamingRules(t *testing.T) {
	route := attribute.String("http.route", "/users/{id}")
	method := attribute.String("http.request.method", "GET")
	for _, tc := range []struct {
		name  string
		cfg   Config
		span  string
		kind  trace.SpanKind
		attrs []attribute.KeyValue
		want  []string
	}{
		{"as is", Config{}, "GET", trace.SpanKindServer, []attribute.KeyValue{route}, []string{"GET"}},
		{"fold route", Config{Fold: []attribute.Key{"http.route"}}, "GET", trace.SpanKindServer,
			[]attribute.KeyValue{route}, []string{"GET /users/{id}"}},
		{"fold two, in Fold's order", Config{Fold: []attribute.Key{"http.request.method", "http.route"}}, "http.server", trace.SpanKindServer,
			[]attribute.KeyValue{route, method}, []string{"http.server GET /users/{id}"}},
		{"fold skips a value already in the name", Config{Fold: []attribute.Key{"http.route"}}, "GET /users/{id}", trace.SpanKindServer,
			[]attribute.KeyValue{route}, []string{"GET /users/{id}"}},
		{"fold without the attribute", Config{Fold: []attribute.Key{"http.route"}}, "GET", trace.SpanKindServer,
			nil, []string{"GET"}},
		{"fold a non-string", Config{Fold: []attribute.Key{"shard"}}, "query", trace.SpanKindClient,
			[]attribute.KeyValue{attribute.Int("shard", 7)}, []string{"query 7"}},
		{"fold stops at the name limit", Config{Fold: []attribute.Key{"a", "b"}}, strings.Repeat("n", 126), trace.SpanKindServer,
			[]attribute.KeyValue{attribute.String("a", "xyz"), attribute.String("b", "second")}, []string{strings.Repeat("n", 126) + " xyz"}},
		{"name func", Config{Name: func(s sdktrace.ReadOnlySpan) string { return "svc." + s.Name() }}, "GET", trace.SpanKindServer,
			nil, []string{"svc.GET"}},
		{"name func drops", Config{Name: func(sdktrace.ReadOnlySpan) string { return "" }}, "GET", trace.SpanKindServer,
			nil, nil},
		{"kinds pass", Config{Kinds: []trace.SpanKind{trace.SpanKindServer}}, "GET", trace.SpanKindServer,
			nil, []string{"GET"}},
		{"kinds drop", Config{Kinds: []trace.SpanKind{trace.SpanKindServer}}, "db", trace.SpanKindClient,
			nil, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tp, rec, _ := newProvider(t, NewSpanProcessor(tc.cfg))
			_, sp := tp.Tracer("test").Start(context.Background(), tc.span, trace.WithSpanKind(tc.kind))
			sp.SetAttributes(tc.attrs...) // set after start, as routers set http.route
			sp.End()
			var names []string
			for _, f := range rec.got {
				names = append(names, f.Name)
			}
			if strings.Join(names, "|") != strings.Join(tc.want, "|") {
				t.Fatalf("sent %q, want %q", names, tc.want)
			}
		})
	}
}

// TestDisabledSendsNothing checks the production path: with no collector
// listening, OnEnd returns before looking at the span.
func TestDisabledSendsNothing(t *testing.T) {
	if emit.Enabled() {
		t.Skip("a collector is listening")
	}
	p := NewSpanProcessor(Config{Fold: []attribute.Key{"http.route"}})
	rec := &recorder{}
	p.record = rec.record // but not always
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(p))
	defer tp.Shutdown(context.Background())
	_, sp := tp.Tracer("test").Start(context.Background(), "GET")
	sp.End()
	if len(rec.got) != 0 {
		t.Fatalf("sent %d spans with nobody listening", len(rec.got))
	}
	if n := testing.AllocsPerRun(1000, func() { p.OnEnd(sp.(sdktrace.ReadOnlySpan)) }); n != 0 {
		t.Fatalf("disabled OnEnd allocates %v times, want 0", n)
	}
}

// TestOnStartSendsTheStart checks the start the processor hands to emit:
// the span's name and start time as OnEnd will repeat them, and that a span
// ended on another goroutine names the goroutine it started on.
func TestOnStartSendsTheStart(t *testing.T) {
	p := NewSpanProcessor(Config{Kinds: []trace.SpanKind{trace.SpanKindServer, trace.SpanKindClient}})
	var mu sync.Mutex
	var starts []emit.Finished
	next := uint64(100)
	p.started = func(f *emit.Finished) uint64 {
		mu.Lock()
		defer mu.Unlock()
		starts = append(starts, *f)
		next++
		return next // the goroutine id emit.Started would return
	}
	tp, rec, sr := newProvider(t, p)
	tr := tp.Tracer("test")
	ctx, server := tr.Start(context.Background(), "GET", trace.WithSpanKind(trace.SpanKindServer))
	_, internal := tr.Start(ctx, "parse") // an internal span: not passed
	internal.End()
	_, db := tr.Start(ctx, "db.query", trace.WithSpanKind(trace.SpanKindClient))
	done := make(chan struct{})
	go func() { db.End(); close(done) }() // ended elsewhere
	<-done
	server.SetName("GET /orders/{id}")
	server.End()

	if len(starts) != 2 || starts[0].Name != "GET" || starts[1].Name != "db.query" {
		t.Fatalf("starts %+v, want GET and db.query", starts)
	}
	ended := sr.Ended()
	byName := map[string]emit.Finished{}
	for _, f := range rec.got {
		byName[f.Name] = f
	}
	for i, want := range []struct {
		start string
		end   string
		g     uint64
	}{{"GET", "GET /orders/{id}", 101}, {"db.query", "db.query", 102}} {
		got, ok := byName[want.end]
		if !ok {
			t.Fatalf("no end for %s in %+v", want.end, rec.got)
		}
		if !got.Start.Equal(starts[i].Start) || got.SpanID != starts[i].SpanID || got.TraceID != starts[i].TraceID {
			t.Errorf("%s: end start %v ids %x/%x, start event %v %x/%x: they must agree", want.end, got.Start, got.TraceID, got.SpanID, starts[i].Start, starts[i].TraceID, starts[i].SpanID)
		}
		if got.Goroutine != want.g {
			t.Errorf("%s: end names goroutine %d, want %d (the one it started on)", want.end, got.Goroutine, want.g)
		}
	}
	if len(ended) != 3 || len(rec.got) != 2 {
		t.Errorf("OpenTelemetry ended %d spans, the processor sent %d; want 3 and 2 (the internal span is not passed)", len(ended), len(rec.got))
	}
}

// TestOnStartIdle checks that OnStart costs nothing while no collector
// listens.
func TestOnStartIdle(t *testing.T) {
	if emit.Enabled() {
		t.Skip("a collector is listening")
	}
	p := NewSpanProcessor(Config{})
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(p))
	defer tp.Shutdown(context.Background())
	_, sp := tp.Tracer("t").Start(context.Background(), "x")
	rw := sp.(sdktrace.ReadWriteSpan)
	if n := testing.AllocsPerRun(1000, func() { p.OnStart(context.Background(), rw) }); n != 0 {
		t.Errorf("idle OnStart allocates %v times", n)
	}
	for i := range p.starts {
		if p.starts[i].span.Load() != 0 {
			t.Fatal("idle OnStart wrote its start table")
		}
	}
}
