//go:build linux

package e2e

import (
	"strings"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/spanwatch/spanwatch/collector"
	"github.com/spanwatch/spanwatch/emit"
	"github.com/spanwatch/spanwatch/snapshot"
	"github.com/spanwatch/spanwatch/source/sdkevent"
	"github.com/spanwatch/spanwatch/userevents"
)

// TestBadInputUserEvents feeds the user_events path what a buggy or hostile
// writer could: a payload shorter than struct span_event, a 64-byte name
// without a terminator, and a span-shaped payload on another user_event
// (an id the collector does not watch) that a perf event makes reach
// perf_tp_event. None may crash the collector or disturb a good series.
func TestBadInputUserEvents(t *testing.T) {
	require(t)
	c := newCollector(t, collector.Config{})
	waitEnabled(t, true)
	if _, err := c.Snapshot(); err != nil {
		t.Fatal(err)
	}

	// A short payload on the span event itself. The kernel checks each
	// write against the event's minimum size and should refuse it; if it
	// ever lets one through, the BPF program must count and drop it.
	ev, err := userevents.Register(sdkevent.Format)
	if err != nil {
		t.Fatal(err)
	}
	defer ev.Close()
	shortErr := ev.Write(make([]byte, 16))

	// An event with another id, with a perf event open on it so that
	// perf_tp_event runs for its writes.
	other, err := userevents.Register(strings.Replace(sdkevent.Format, "spanwatch_span", "spanwatch_e2e_other", 1))
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	id, err := userevents.EventID("spanwatch_e2e_other")
	if err != nil {
		t.Fatal(err)
	}
	attr := unix.PerfEventAttr{Type: unix.PERF_TYPE_TRACEPOINT, Config: uint64(id), Size: uint32(unsafe.Sizeof(unix.PerfEventAttr{}))}
	var fds []int
	for _, cpu := range onlineCPUs(t) {
		fd, err := unix.PerfEventOpen(&attr, -1, cpu, -1, unix.PERF_FLAG_FD_CLOEXEC)
		if err != nil {
			t.Fatalf("perf event on spanwatch_e2e_other: %v", err)
		}
		fds = append(fds, fd)
	}
	defer func() {
		for _, fd := range fds {
			unix.Close(fd)
		}
	}()
	payload := make([]byte, 184)    // sizeof(struct span_event)
	payload[0] = 0x40               // duration 64 ns
	copy(payload[56:], "unwatched") // name
	for deadline := time.Now().Add(2 * time.Second); !other.Enabled(); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("spanwatch_e2e_other never enabled by its perf events")
		}
	}
	for i := 0; i < 10; i++ {
		if err := other.Write(payload); err != nil {
			t.Fatalf("write to the unwatched event: %v", err)
		}
	}

	long := strings.Repeat("x", 200) // fills the payload's 128 bytes, no NUL
	recordSpans("good", 100)
	recordSpans(long, 5)
	got, s := snapshotSeries(t, c)
	checkSeries(t, got, "good", wantFor(100))
	checkSeries(t, got, snapshot.TruncateName(long), wantFor(5))
	if s.Stats.NamesTruncated != 5 {
		t.Errorf("names truncated %d, want 5", s.Stats.NamesTruncated)
	}
	if w, ok := got["unwatched"]; ok {
		t.Errorf("a payload on an unwatched event id was aggregated: %+v", w)
	}
	if len(got) != 2 {
		t.Errorf("series %v, want only good and the cut long name", got)
	}
	if shortErr == nil && s.Stats.ShortEvents != 1 {
		t.Errorf("the kernel took a 16-byte payload but short_events = %d, want 1", s.Stats.ShortEvents)
	}
	t.Logf("short payload: kernel answered %v; short_events %d", shortErr, s.Stats.ShortEvents)
	if emit.WriteErrors() != 0 {
		t.Errorf("the SDK saw %d write errors", emit.WriteErrors())
	}
}
