//go:build linux

package collector

import (
	"fmt"
	"sync"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"

	"github.com/spanwatch/spanwatch/userevents"
)

// SpanEventFormat is the span user_event's format: the fields of struct
// span_event in bpf/span_event.h. emit.Format is the same string (a test
// checks it); the collector registers it itself so the tracepoint exists,
// with a stable id, before any application starts.
const SpanEventFormat = "spanwatch_span u64 duration_ns; u64 start_ns; u32 status; u32 flags; char[16] trace_id; char[8] span_id; u64 exec_id; char[128] name"

const spanEventName = "spanwatch_span"

// cpuCheckInterval is how often the online CPUs are checked against the
// perf events of user_events sources (perfSet.check): spans written on a
// CPU that comes online are lost for at most this long.
var cpuCheckInterval = time.Second

// userEventsSource is the user_events span source: the collector's own
// registration of the event, the BPF program on perf_tp_event, and a
// counting perf event on the tracepoint per online CPU.
type userEventsSource struct {
	ev     *userevents.Event
	id     uint32
	prog   link.Link
	method string
	perf   *perfSet
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
	s.prog, err = attachTPProgram(objs.method, objs.tp)
	if err != nil {
		return nil, err
	}
	ncpu, err := ebpf.PossibleCPU()
	if err != nil {
		return nil, err
	}
	s.perf = newPerfSet(cfg.Logger, ncpu)
	if err := s.perf.add(s.id, spanEventName); err != nil {
		return nil, err
	}
	s.wg.Add(1)
	go func() { defer s.wg.Done(); watchCPUs(s.perf, s.stop) }()
	return s, nil
}

// attachTPProgram attaches a program on perf_tp_event by method.
func attachTPProgram(method string, prog *ebpf.Program) (link.Link, error) {
	var l link.Link
	var err error
	if method == "fentry" {
		l, err = link.AttachTracing(link.TracingOptions{Program: prog})
	} else {
		l, err = link.Kprobe("perf_tp_event", prog, nil)
	}
	if err != nil {
		return nil, fmt.Errorf("attach %s to perf_tp_event: %w", method, err)
	}
	return l, nil
}

// watchCPUs checks p against the online CPUs every cpuCheckInterval until
// stop is closed.
func watchCPUs(p *perfSet, stop <-chan struct{}) {
	t := time.NewTicker(cpuCheckInterval)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
			p.check()
		}
	}
}

func (s *userEventsSource) close() {
	if s.stop != nil {
		close(s.stop)
		s.wg.Wait()
		s.stop = nil
	}
	if s.perf != nil {
		s.perf.close()
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
// the collector reopened them, within cpuCheckInterval, were lost.
func (c *Collector) UserEventsCPUGaps() uint64 {
	if c.ue == nil || c.ue.perf == nil {
		return 0
	}
	return c.ue.perf.statsNow().Gaps
}
