//go:build linux

package collector

import (
	"fmt"
	"sync"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"

	"github.com/spanwatch/spanwatch/internal/perftp"
	"github.com/spanwatch/spanwatch/userevents"
)

// SpanEventFormat is the span user_event's format: the fields of struct
// span_event in bpf/span_event.h. emit.Format is the same string (a test
// checks it); the collector registers it itself so the tracepoint exists,
// with a stable id, before any application starts.
const SpanEventFormat = "spanwatch_span u64 duration_ns; u64 start_ns; u32 status; u32 flags; char[16] trace_id; char[8] span_id; u64 exec_id; char[128] name"

const spanEventName = "spanwatch_span"

// userEventsSource is the user_events span source: the collector's own
// registration of the event, the BPF program on perf_tp_event, and a
// counting perf event on the tracepoint per online CPU.
type userEventsSource struct {
	ev     *userevents.Event
	id     uint32
	prog   link.Link
	method string
	perf   *perftp.Set
	stop   chan struct{}
	wg     sync.WaitGroup
}

func attachUserEvents(objs *objects, cfg Config) (_ *userEventsSource, err error) {
	s := &userEventsSource{stop: make(chan struct{})}
	defer func() {
		if err != nil {
			s.close()
		}
	}()
	s.ev, err = userevents.Register(SpanEventFormat)
	if err != nil {
		return nil, err // names the event and says what to do
	}
	s.id, err = userevents.EventID(spanEventName)
	if err != nil {
		return nil, fmt.Errorf("user_event %s: %w", spanEventName, err)
	}
	if err := objs.WatchedEvents.Put(s.id, uint32(1)); err != nil {
		return nil, fmt.Errorf("watch user_event id %d: %w", s.id, err)
	}
	s.method = objs.method
	s.prog, err = perftp.AttachProgram(objs.method, objs.tp)
	if err != nil {
		return nil, err
	}
	ncpu, err := ebpf.PossibleCPU()
	if err != nil {
		return nil, err
	}
	s.perf = perftp.New(cfg.Logger, ncpu)
	if err := s.perf.Add(s.id, spanEventName); err != nil {
		return nil, err
	}
	s.wg.Add(1)
	go func() { defer s.wg.Done(); perftp.Watch(s.perf, s.stop) }()
	return s, nil
}

func (s *userEventsSource) close() {
	if s.stop != nil {
		close(s.stop)
		s.wg.Wait()
		s.stop = nil
	}
	if s.perf != nil {
		s.perf.Close()
	}
	if s.prog != nil {
		s.prog.Close()
		s.prog = nil
	}
	if s.ev != nil {
		s.ev.Close()
		s.ev = nil
	}
}

// UserEventsCPUGaps reports how many times a CPU was found without live
// perf events on the spanwatch_span tracepoint (it came online after the
// collector started, or went offline and back): spans written there until
// the collector reopened them, within perftp.CheckInterval, were lost.
func (c *Collector) UserEventsCPUGaps() uint64 {
	if c.ue == nil || c.ue.perf == nil {
		return 0
	}
	return c.ue.perf.Stats().Gaps
}
