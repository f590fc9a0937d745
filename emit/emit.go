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
	exec  uintptr   // the goroutine that started it
}

// Start starts a span. Name it by what it does ("checkout", "db.query"),
// not by a request's unique values, so its statistics aggregate.
//
// While a collector listens, Start tells the kernel the span began, so that
// spanwatch can sample it while it runs past its budget (where its time
// goes, and whether it is stuck) on whatever thread its goroutine runs;
// while none listens it costs one load and a branch.
func Start(name string) Span {
	if probe.word == 0 {
		return Span{name: name}
	}
	return start(name)
}

// start is Start's listening path, apart so that Start inlines: while no
// collector listens a span costs one load and a branch.
//
//go:noinline
func start(name string) Span {
	s := Span{name: name, start: time.Now(), exec: getg()}
	var ev event
	ev.fill(name, s.start, 0, false)
	ev.Flags = flagStart
	ev.ExecID = uint64(s.exec)
	send(&ev)
	return s
}

// End records the span with an error status when err is not nil.
func (s Span) End(err error) {
	if probe.word == 0 || s.start.IsZero() {
		return
	}
	var ev event
	ev.fill(s.name, s.start, time.Since(s.start), err != nil)
	ev.ExecID = uint64(s.exec)
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
	ev.ExecID = uint64(s.exec)
	send(&ev)
}

// Started tells the kernel that a span began, for a span that a tracing
// library times itself and hands over with Record when it ends (see
// emit/otel): f.Start is its identity, which Record must repeat. The span
// belongs to the calling goroutine, whatever thread runs it; Started
// returns that goroutine's id for Finished.Goroutine, for a span that may
// end on another goroutine. It returns 0 while no collector listens.
func Started(f *Finished) uint64 {
	if probe.word == 0 || f.Start.IsZero() {
		return 0
	}
	var ev event
	ev.fill(f.Name, f.Start, 0, false)
	ev.Flags = flagStart
	if f.NamePrefix {
		ev.Flags |= flagNamePrefix
	}
	ev.TraceID = f.TraceID
	ev.SpanID = f.SpanID
	ev.ExecID = uint64(getg())
	send(&ev)
	return ev.ExecID
}

// Record records a span that has already finished, for example one ended
// by a tracing library (see emit/otel). A span whose start was reported
// with Started is matched to it by f.Start.
func Record(f *Finished) {
	if probe.word == 0 {
		return
	}
	var ev event
	ev.fill(f.Name, f.Start, f.Duration, f.Error)
	ev.TraceID = f.TraceID
	ev.SpanID = f.SpanID
	ev.ExecID = f.Goroutine
	if ev.ExecID == 0 {
		ev.ExecID = uint64(getg())
	}
	send(&ev)
}
