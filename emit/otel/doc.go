// Package otel bridges OpenTelemetry tracing to spanwatch: a SpanProcessor
// that hands every ended span to the span SDK (package emit), so services
// already instrumented with OpenTelemetry feed spanwatch with one line:
//
//	tp := sdktrace.NewTracerProvider(
//		sdktrace.WithSpanProcessor(otel.NewSpanProcessor(otel.Config{Fold: []attribute.Key{"http.route"}})),
//		... // exporters as before
//	)
//
// Each span arrives with its name, duration, start time, error status
// (codes.Error) and the trace and span ids the SDK assigned, so an overrun
// that spanwatch captures carries the trace id the tracing backend shows.
//
// While no spanwatch collector listens, OnEnd costs one load and a branch
// and allocates nothing (BenchmarkOnEnd).
package otel
