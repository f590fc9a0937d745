package emit

import (
	"time"
	"unsafe"

	"github.com/spanwatch/spanwatch/internal/spanevent"
)

// event mirrors struct span_event in bpf/span_event.h; layout_test.go checks
// that they agree.
type event struct {
	DurationNs uint64
	StartNs    uint64
	Status     uint32
	Flags      uint32
	TraceID    [16]byte
	SpanID     [8]byte
	ExecID     uint64
	Name       [spanevent.NameLen]byte
}

const eventSize = int(unsafe.Sizeof(event{}))

// Format is the user_events format string of the span event: the fields of
// struct span_event, in order. C emitters (include/spanwatch.h) register the
// same string.
const Format = "spanwatch_span u64 duration_ns; u64 start_ns; u32 status; u32 flags; char[16] trace_id; char[8] span_id; u64 exec_id; char[128] name"

// EventName is the user_event's name.
const EventName = "spanwatch_span"

// Flags of the span event (SPAN_F_* in bpf/span_event.h).
const (
	flagStart      = 1 // a span's start
	flagNamePrefix = 2 // its final name may extend the start's
)

// Status values.
const (
	statusOK    = 0
	statusError = 1
)

// Finished is a span that has already ended, for Record.
type Finished struct {
	// Name is the span name; the kernel cuts names longer than 127 bytes
	// on a UTF-8 character boundary (and counts them).
	Name string
	// Start is when the span started; the zero time means unknown.
	Start    time.Time
	Duration time.Duration
	Error    bool
	TraceID  [16]byte
	SpanID   [8]byte
	// Goroutine is what Started returned for the span: the goroutine it
	// started on, when it may end on another; 0 means the caller's.
	Goroutine uint64
	// NamePrefix, for Started, says the span's final name may extend
	// Name with a space and more (a name completed when the span ends):
	// while it runs it is judged by the smallest budget such a name could
	// have.
	NamePrefix bool
}

func (e *event) fill(name string, start time.Time, d time.Duration, isErr bool) {
	if d > 0 {
		e.DurationNs = uint64(d)
	}
	if !start.IsZero() {
		e.StartNs = uint64(start.UnixNano())
	}
	if isErr {
		e.Status = statusError
	}
	copy(e.Name[:], name)
}
