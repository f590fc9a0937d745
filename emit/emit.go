package emit

import (
	"time"
)

// Enabled reports whether a collector listens: one load and a branch. Code
// that builds span names or attributes expensively can check it first.
func Enabled() bool {
	return probe.word != 0
}

// Span is a running span, returned by Start. It is a value: starting and
// ending a span allocates nothing.
type Span struct {
	name  string
	start time.Time // carries the monotonic clock reading
}

// Start starts a span. Name it by what it does ("checkout", "db.query"),
// not by a request's unique values, so its statistics aggregate.
func Start(name string) Span {
	if probe.word == 0 {
		return Span{name: name}
	}
	return Span{name: name, start: time.Now()}
}

// End records the span with an error status when err is not nil.
func (s Span) End(err error) {
	if probe.word == 0 || s.start.IsZero() {
		return
	}
	var ev event
	ev.fill(s.name, s.start, time.Since(s.start), err != nil)
	send(&ev)
}

// EndWithIDs is End for a span that carries trace and span ids.
func (s Span) EndWithIDs(err error, traceID [16]byte, spanID [8]byte) {
	if probe.word == 0 || s.start.IsZero() {
		return
	}
	var ev event
	ev.fill(s.name, s.start, time.Since(s.start), err != nil)
	ev.TraceID = traceID
	ev.SpanID = spanID
	send(&ev)
}

// Record records a span that has already finished, for example one ended
// by a tracing library (see emit/otel).
func Record(f *Finished) {
	if probe.word == 0 {
		return
	}
	var ev event
	ev.fill(f.Name, f.Start, f.Duration, f.Error)
	ev.TraceID = f.TraceID
	ev.SpanID = f.SpanID
	send(&ev)
}
