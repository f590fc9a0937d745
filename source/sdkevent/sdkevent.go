//go:build linux

// Package sdkevent is the span SDK's user_event source: spanwatch
// registers the spanwatch_span user_event itself (so the tracepoint
// exists, with a stable id, before any application starts), the core
// object's program on perf_tp_event aggregates each one the SDKs write
// (emit, include/spanwatch.h), and a counting perf event per online CPU
// keeps the tracepoint enabled.
//
// Its program is the core object's own (source.Programs.Tracepoint): it is
// compiled with the aggregation and loaded with the core. The source owns
// the registration, the attach and the perf events.
package sdkevent

import (
	"errors"
	"fmt"
	"sync"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"

	"github.com/spanwatch/spanwatch/internal/perftp"
	"github.com/spanwatch/spanwatch/source"
	"github.com/spanwatch/spanwatch/userevents"
)

// Format is the span user_event's format: the fields of struct span_event
// in bpf/span_event.h. emit.Format is the same string (a test checks it).
const Format = "spanwatch_span u64 duration_ns; u64 start_ns; u32 status; u32 flags; char[16] trace_id; char[8] span_id; u64 exec_id; char[128] name"

// Name is the event's name, the first word of Format.
const Name = "spanwatch_span"

// A Source is the attached spanwatch_span user_event: the registration,
// the program's link and the counting perf events.
type Source struct {
	ev     *userevents.Event
	id     uint32
	prog   link.Link
	method string
	perf   *perftp.Set
	stop   chan struct{}
	wg     sync.WaitGroup
	once   sync.Once
}

// Attach registers the event and attaches the core's tracepoint program to
// it. Where the kernel has no user_events the error wraps
// userevents.ErrNotSupported.
func Attach(core *source.Core) (_ *Source, err error) {
	p := core.Programs
	if p.Tracepoint == nil || p.WatchedEvents == nil {
		return nil, errors.New("user_events source: the core object has no tracepoint program")
	}
	s := &Source{stop: make(chan struct{})}
	defer func() {
		if err != nil {
			s.Close()
		}
	}()
	s.ev, err = userevents.Register(Format)
	if err != nil {
		return nil, err // names the event and says what to do
	}
	s.id, err = userevents.EventID(Name)
	if err != nil {
		return nil, fmt.Errorf("user_event %s: %w", Name, err)
	}
	if err := p.WatchedEvents.Put(s.id, uint32(1)); err != nil {
		return nil, fmt.Errorf("watch user_event id %d: %w", s.id, err)
	}
	s.method = core.TracepointMethod
	s.prog, err = perftp.AttachProgram(s.method, p.Tracepoint)
	if err != nil {
		return nil, err
	}
	ncpu, err := ebpf.PossibleCPU()
	if err != nil {
		return nil, err
	}
	s.perf = perftp.New(core.Logger, ncpu)
	if err := s.perf.Add(s.id, Name); err != nil {
		return nil, err
	}
	s.wg.Add(1)
	go func() { defer s.wg.Done(); perftp.Watch(s.perf, s.stop) }()
	return s, nil
}

// Kind is "user_events".
func (s *Source) Kind() string { return "user_events" }

// Counts returns nil: the SDK's spans are counted in the core's own
// counters.
func (s *Source) Counts() (map[string]uint64, error) { return nil, nil }

// Method is how the program on perf_tp_event is attached: "fentry" or
// "kprobe".
func (s *Source) Method() string { return s.method }

// CPUGaps reports how many times a CPU was found without live perf events
// on the tracepoint (it came online after the source attached, or went
// offline and back): spans written there until they were reopened, within
// perftp.CheckInterval, were lost.
func (s *Source) CPUGaps() uint64 {
	if s.perf == nil {
		return 0
	}
	return s.perf.Stats().Gaps
}

// Close detaches the program, closes the perf events and the
// registration. It is idempotent.
func (s *Source) Close() error {
	s.once.Do(func() {
		close(s.stop)
		s.wg.Wait()
		if s.perf != nil {
			s.perf.Close()
		}
		if s.prog != nil {
			s.prog.Close()
		}
		if s.ev != nil {
			s.ev.Close()
		}
	})
	return nil
}
