//go:build linux

package collector

import (
	"fmt"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"

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
// counting perf event on the tracepoint per CPU.
type userEventsSource struct {
	ev     *userevents.Event
	id     uint32
	prog   link.Link
	method string
	perf   []int
}

func attachUserEvents(objs *objects, cfg Config) (_ *userEventsSource, err error) {
	s := &userEventsSource{}
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
	if objs.method == "fentry" {
		s.prog, err = link.AttachTracing(link.TracingOptions{Program: objs.tp})
	} else {
		s.prog, err = link.Kprobe("perf_tp_event", objs.tp, nil)
	}
	if err != nil {
		err = fmt.Errorf("attach %s to perf_tp_event: %w", objs.method, err)
	}
	if err != nil {
		return nil, err
	}
	// perf_tp_event runs only for the CPUs with a perf event open on the
	// tracepoint: open a counting (non-sampling) one on every CPU.
	ncpu, err := ebpf.PossibleCPU()
	if err != nil {
		return nil, err
	}
	online := onlineCPUs(ncpu)
	for cpu := 0; cpu < ncpu; cpu++ {
		if !online[cpu] {
			continue
		}
		attr := unix.PerfEventAttr{
			Type:   unix.PERF_TYPE_TRACEPOINT,
			Config: uint64(s.id),
			Size:   uint32(unsafeSizeofPerfAttr),
		}
		fd, err := unix.PerfEventOpen(&attr, -1, cpu, -1, unix.PERF_FLAG_FD_CLOEXEC)
		if err != nil {
			return nil, fmt.Errorf("open perf event on user_event %s (id %d) on cpu %d: %w", spanEventName, s.id, cpu, err)
		}
		s.perf = append(s.perf, fd)
	}
	return s, nil
}

func (s *userEventsSource) close() {
	for _, fd := range s.perf {
		unix.Close(fd)
	}
	s.perf = nil
	if s.prog != nil {
		s.prog.Close()
		s.prog = nil
	}
	if s.ev != nil {
		s.ev.Close()
		s.ev = nil
	}
}

// onlineCPUs reads /sys/devices/system/cpu/online; every possible CPU
// counts as online when it cannot be read.
func onlineCPUs(n int) []bool {
	out := make([]bool, n)
	cpus, err := parseCPUList("/sys/devices/system/cpu/online")
	if err != nil {
		for i := range out {
			out[i] = true
		}
		return out
	}
	for _, c := range cpus {
		if c < n {
			out[c] = true
		}
	}
	return out
}
