//go:build linux

package perftp

import (
	"bytes"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"
)

// kernelTracepoint returns the id of a tracepoint every kernel has, for
// tests of perf events that need no user_events.
func kernelTracepoint(t *testing.T) uint32 {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root to open perf events")
	}
	b, err := os.ReadFile("/sys/kernel/tracing/events/sched/sched_switch/id")
	if err != nil {
		t.Skipf("no tracefs with sched:sched_switch here: %v", err)
	}
	id, err := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 32)
	if err != nil {
		t.Fatal(err)
	}
	return uint32(id)
}

// TestPerfSetFollowsOnlineCPUs: with the online list faked, perf events
// are closed on a CPU that goes offline and reopened (a gap counted) when
// it comes back; an event that stopped counting is found and reopened.
func TestPerfSetFollowsOnlineCPUs(t *testing.T) {
	id := kernelTracepoint(t)
	ncpu, err := ebpf.PossibleCPU()
	if err != nil {
		t.Fatal(err)
	}
	if ncpu < 2 {
		t.Skip("needs 2 CPUs")
	}
	var logs bytes.Buffer
	p := New(slog.New(slog.NewTextHandler(&logs, nil)), ncpu)
	online := filepath.Join(t.TempDir(), "online")
	all := "0-" + strconv.Itoa(ncpu-1)
	write := func(s string) {
		if err := os.WriteFile(online, []byte(s+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write(all)
	p.onlinePath = online
	p.online = p.readOnline()
	defer p.Close()
	if err := p.Add(id, "sched_switch"); err != nil {
		t.Fatal(err)
	}
	open := func() (n int) {
		for _, fd := range p.fds[id] {
			if fd >= 0 {
				n++
			}
		}
		return n
	}
	if open() != ncpu {
		t.Fatalf("%d perf events open, want %d", open(), ncpu)
	}
	time.Sleep(20 * time.Millisecond)
	p.Check()
	if s := p.Stats(); s.Gaps != 0 || open() != ncpu {
		t.Fatalf("a live set: %+v, %d open; enabled times %v", s, open(), p.seen)
	}
	for cpu := 0; cpu < ncpu; cpu++ {
		if p.seen[cpu] == 0 {
			t.Fatalf("cpu %d: no enabled time read", cpu)
		}
	}
	// Enabled time advances on a live event.
	before := p.seen[1]
	time.Sleep(20 * time.Millisecond)
	p.Check()
	if p.seen[1] <= before || p.Stats().Gaps != 0 {
		t.Fatalf("cpu 1 enabled time %d then %d; gaps %d", before, p.seen[1], p.Stats().Gaps)
	}

	write("0")
	p.Check()
	if s := p.Stats(); s.Offline != uint64(ncpu-1) || open() != 1 || p.fds[id][0] < 0 {
		t.Fatalf("cpus 1.. offline: %+v, %d open", s, open())
	}
	write(all)
	p.Check()
	if s := p.Stats(); s.Gaps != uint64(ncpu-1) || open() != ncpu {
		t.Fatalf("cpus back: %+v, %d open", s, open())
	}
	// An event the kernel stopped (as it does for a CPU that went offline
	// and back between checks): disabled, its enabled time stands still.
	fd := p.fds[id][1]
	if err := unix.IoctlSetInt(fd, unix.PERF_EVENT_IOC_DISABLE, 0); err != nil {
		t.Fatal(err)
	}
	time.Sleep(20 * time.Millisecond)
	p.Check() // reads the time once more while it stands still
	time.Sleep(20 * time.Millisecond)
	p.Check()
	if s := p.Stats(); s.Gaps != uint64(ncpu) || open() != ncpu || p.fds[id][1] == fd && p.seen[1] == 0 {
		t.Fatalf("a stopped event: %+v, %d open", s, open())
	}
	if !strings.Contains(logs.String(), "msg=cpu_perf_events_reopened cpu=1 reason=detached") {
		t.Errorf("log:\n%s", logs.String())
	}
}
