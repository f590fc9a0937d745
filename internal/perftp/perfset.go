//go:build linux

package perftp

import (
	"encoding/binary"
	"fmt"
	"log/slog"
	"sync"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Set keeps a counting (non-sampling) perf event open on every online
// CPU for each watched tracepoint: perf_tp_event() runs, and so the BPF
// programs on it see a user_event's payload, only on the CPUs where a perf
// event is open on that tracepoint. The enable bit an application tests is
// global, so a CPU without one loses its writes silently.
//
// CPUs come and go (hotplug). A CPU that goes offline takes its perf
// events out of their context for good (kernel/events/core.c:
// __perf_event_exit_context detaches them; perf_event_init_cpu brings
// none back), and perf_event_open refuses an offline CPU. Check reads
// the online CPUs, opens what a CPU that came online lacks, closes what an
// offline CPU holds, and finds the events of a CPU that went offline and
// came back between two checks by their enabled time, which stops when
// the kernel detaches them: one event per CPU is read (the first
// tracepoint's), and all of that CPU's are reopened when it is dead.
// Writes on such a CPU between its coming online and the next check are
// lost; gaps counts the CPUs found so.
type Set struct {
	log        *slog.Logger
	onlinePath string // /sys/devices/system/cpu/online

	mu     sync.Mutex
	ncpu   int
	online []bool
	ids    []uint32          // watched tracepoints, in the order added
	names  map[uint32]string // for logs
	fds    map[uint32][]int  // id -> fd per CPU, -1 none
	seen   []uint64          // per CPU: enabled time at the last check
	stats  Stats
	closed bool
}

// Stats counts what Check found.
type Stats struct {
	// Gaps counts CPUs found without live perf events: came online after
	// start, or went offline and back between two checks. Spans written
	// there in the meantime were lost.
	Gaps uint64
	// Offline counts CPUs seen going offline.
	Offline uint64
}

func New(log *slog.Logger, ncpu int) *Set {
	p := &Set{
		log:        log,
		onlinePath: "/sys/devices/system/cpu/online",
		ncpu:       ncpu,
		names:      map[uint32]string{},
		fds:        map[uint32][]int{},
		seen:       make([]uint64, ncpu),
	}
	p.online = p.readOnline()
	return p
}

// readOnline reads the online CPUs; every possible CPU counts as online
// when the file cannot be read.
func (p *Set) readOnline() []bool {
	out := make([]bool, p.ncpu)
	cpus, err := parseCPUList(p.onlinePath)
	if err != nil {
		for i := range out {
			out[i] = true
		}
		return out
	}
	for _, c := range cpus {
		if c < p.ncpu {
			out[c] = true
		}
	}
	return out
}

// perfAttr is a counting tracepoint event whose reads also return the
// time it has been enabled.
func perfAttr(id uint32) unix.PerfEventAttr {
	return unix.PerfEventAttr{
		Type:        unix.PERF_TYPE_TRACEPOINT,
		Config:      uint64(id),
		Size:        uint32(unsafe.Sizeof(unix.PerfEventAttr{})),
		Read_format: unix.PERF_FORMAT_TOTAL_TIME_ENABLED,
	}
}

func openTP(id uint32, cpu int) (int, error) {
	attr := perfAttr(id)
	return unix.PerfEventOpen(&attr, -1, cpu, -1, unix.PERF_FLAG_FD_CLOEXEC)
}

// add opens the tracepoint's perf event on every online CPU. On error
// none stays open.
func (p *Set) Add(id uint32, name string) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if _, ok := p.fds[id]; ok {
		return nil
	}
	fds := make([]int, p.ncpu)
	for cpu := range fds {
		fds[cpu] = -1
		if !p.online[cpu] {
			continue
		}
		fd, err := openTP(id, cpu)
		if err != nil {
			for _, f := range fds[:cpu] {
				if f >= 0 {
					unix.Close(f)
				}
			}
			return fmt.Errorf("open perf event on %s (tracepoint id %d) on cpu %d: %w", name, id, cpu, err)
		}
		fds[cpu] = fd
	}
	p.fds[id] = fds
	p.names[id] = name
	p.ids = append(p.ids, id)
	return nil
}

// remove closes the tracepoint's perf events.
func (p *Set) Remove(id uint32) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, fd := range p.fds[id] {
		if fd >= 0 {
			unix.Close(fd)
		}
	}
	delete(p.fds, id)
	delete(p.names, id)
	for i, x := range p.ids {
		if x == id {
			p.ids = append(p.ids[:i], p.ids[i+1:]...)
			break
		}
	}
}

// enabledTime reads a counting event's enabled time.
func enabledTime(fd int) (uint64, error) {
	var b [16]byte
	n, err := unix.Read(fd, b[:])
	if err != nil {
		return 0, err
	}
	if n != len(b) {
		return 0, fmt.Errorf("read %d bytes of a perf event, want %d", n, len(b))
	}
	return binary.NativeEndian.Uint64(b[8:]), nil
}

// check brings the perf events in line with the CPUs online now.
func (p *Set) Check() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return
	}
	online := p.readOnline()
	for cpu := 0; cpu < p.ncpu; cpu++ {
		switch {
		case !online[cpu] && p.online[cpu]:
			p.stats.Offline++
			p.closeCPU(cpu)
			p.log.Info("cpu_offline", "cpu", cpu)
		case online[cpu] && !p.online[cpu]:
			p.stats.Gaps++
			p.openCPU(cpu, "came_online")
		case online[cpu] && len(p.ids) > 0:
			fd := p.fds[p.ids[0]][cpu]
			t, err := enabledTime(fd)
			if fd < 0 || err != nil || t == p.seen[cpu] {
				// Detached by an offline and online since the last
				// check (or never opened: a failed reopen).
				p.stats.Gaps++
				p.closeCPU(cpu)
				p.openCPU(cpu, "detached")
				continue
			}
			p.seen[cpu] = t
		}
	}
	p.online = online
}

func (p *Set) closeCPU(cpu int) {
	for _, id := range p.ids {
		if fd := p.fds[id][cpu]; fd >= 0 {
			unix.Close(fd)
			p.fds[id][cpu] = -1
		}
	}
	p.seen[cpu] = 0
}

func (p *Set) openCPU(cpu int, why string) {
	opened := 0
	for _, id := range p.ids {
		fd, err := openTP(id, cpu)
		if err != nil {
			p.log.Warn("perf_event_open_failed", "cpu", cpu, "tracepoint", p.names[id], "error", err)
			continue
		}
		p.fds[id][cpu] = fd
		opened++
	}
	if len(p.ids) > 0 {
		if t, err := enabledTime(p.fds[p.ids[0]][cpu]); err == nil {
			p.seen[cpu] = t
		}
	}
	p.log.Info("cpu_perf_events_reopened", "cpu", cpu, "reason", why, "tracepoints", opened,
		"effect", "user_events written on this cpu since it came online were lost")
}

func (p *Set) Stats() Stats {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.stats
}

func (p *Set) Close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.closed = true
	for _, fds := range p.fds {
		for _, fd := range fds {
			if fd >= 0 {
				unix.Close(fd)
			}
		}
	}
	p.fds = map[uint32][]int{}
	p.ids = nil
}
