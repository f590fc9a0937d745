package inflight

import (
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"github.com/cilium/ebpf/link"
	"github.com/cilium/ebpf/ringbuf"

	"github.com/spanwatch/spanwatch/bpf"
	"github.com/spanwatch/spanwatch/internal/bpftest"
	"github.com/spanwatch/spanwatch/internal/logtest"
	"github.com/spanwatch/spanwatch/snapshot"
)

// TestBlockedSamplerStaysOffFUSE: a process whose span is over its budget
// blocks in a system call with its frame pointer in a file mapping of a
// FUSE file whose daemon never answers reads (testdata/farframe.c), as a
// hostile user can arrange. The blocked sampler reads another process's
// memory from the agent (bpf_copy_from_user_task faults pages in), and a
// fault on that page would wait for the daemon for ever, with the
// watcher's lock held. The sampler reads only anonymous memory and files
// of local file systems: the scan returns, and the sample is taken with
// the user stack cut at the frame it would not read.
func TestBlockedSamplerStaysOffFUSE(t *testing.T) {
	m := newMaps(t)
	file, abort := stallingFUSE(t)
	cmd, _ := startProgram(t, "farframe", file)
	pid := uint32(cmd.Process.Pid)
	waitSleeping(t, pid)

	overdueSpan(t, m, pid, "farframe")
	w, err := New(Config{Inflight: m.inflight, Sources: m.sources, Budgets: m.budgets, Overruns: m.overruns, Counters: m.counters,
		NoOnCPU: true, NoOffCPU: true, Samples: 2})
	if err != nil {
		bpftest.SkipUnlessLoaded(t, "load the inflight programs", err)
	}
	defer w.Close()
	if !w.SamplesBlocked() {
		t.Fatal("the blocked sampler does not run on a kernel that has what it needs")
	}
	rd, err := ringbuf.NewReader(m.overruns)
	if err != nil {
		t.Fatal(err)
	}
	defer rd.Close()

	scanned := make(chan error, 1)
	go func() { scanned <- w.Scan() }()
	select {
	case err := <-scanned:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		// Aborting the FUSE connection fails the stuck read: the scan
		// returns, and the watcher can close.
		abort()
		<-scanned
		t.Fatal("the scan was stuck reading the process's memory (a page of a FUSE file that never arrives) until the FUSE connection was aborted")
	}
	rd.SetDeadline(time.Now().Add(5 * time.Second))
	rec, err := rd.Read()
	if err != nil {
		t.Fatalf("no sample of the blocked thread: %v", err)
	}
	r := (*bpf.SpanwatchOverrun)(unsafe.Pointer(&rec.RawSample[0]))
	if r.Pid != pid || r.Status != StatusStillRunning|StatusOffCPU {
		t.Errorf("sample: pid %d status %#x, want %d and %#x", r.Pid, r.Status, pid, StatusStillRunning|StatusOffCPU)
	}
	// The instruction pointer, and no frame read through the FUSE page.
	if r.UstackLen != 8 {
		t.Errorf("user stack of %d bytes, want 8: the pc alone", r.UstackLen)
	}
}

// TestBlockedSamplerGivesUp: a run of the blocked sampler that does not
// return (a read of a process's memory that waits for a page a FUSE
// daemon never sends, in an area remapped between the sampler's look and
// its read) holds the scan at most blockedWait: the scan returns, the
// sampler is given up and says so once, later scans do not run it, and
// the watcher closes.
func TestBlockedSamplerGivesUp(t *testing.T) {
	m := newMaps(t)
	cmd, _ := startBusy(t, "block")
	pid := uint32(cmd.Process.Pid)
	waitSleeping(t, pid)
	overdueSpan(t, m, pid, "held")
	var logs logtest.Recorder
	w, err := New(Config{Logger: logs.Logger(), Inflight: m.inflight, Sources: m.sources, Budgets: m.budgets, Overruns: m.overruns,
		Counters: m.counters, NoOnCPU: true, NoOffCPU: false, Samples: 100})
	if err != nil {
		bpftest.SkipUnlessLoaded(t, "load the inflight programs", err)
	}
	defer w.Close()
	if !w.SamplesBlocked() {
		t.Fatal("the blocked sampler does not run on a kernel that has what it needs")
	}
	release := make(chan struct{})
	defer close(release)
	var runs atomic.Int32
	w.runIterFn = func(*link.Iter) error { runs.Add(1); <-release; return nil }
	w.blockedWait = 200 * time.Millisecond

	for i := range 2 {
		scanned := make(chan error, 1)
		go func() { scanned <- w.Scan() }()
		select {
		case err := <-scanned:
			if err != nil {
				t.Fatalf("scan %d: %v", i, err)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("scan %d held past 5s by a blocked sampler that does not return (given up after %v)", i, w.blockedWait)
		}
	}
	if runs.Load() != 1 || w.SamplesBlocked() || logs.Count("inflight_blocked_sampler_stuck") != 1 {
		t.Errorf("after two scans: the stuck sampler ran %d times, still in use %v, logged %d times; want 1, false, 1",
			runs.Load(), w.SamplesBlocked(), logs.Count("inflight_blocked_sampler_stuck"))
	}
}

// overdueSpan puts a span of process pid's main thread in usdt_inflight
// as usdt_start would (USDT source 7), begun 2 s ago against a 100 ms
// budget that wants user stacks.
func overdueSpan(t *testing.T, m maps, pid uint32, span string) {
	t.Helper()
	src := bpf.UsdtUsdtSource{Name: nameBytes(span), NameArg: noArg, KeyArg: noArg, ValueArg: noArg}
	if err := m.sources.Put(uint32(7), &src); err != nil {
		t.Fatal(err)
	}
	budget := bpf.SpanwatchBudget{BudgetNs: uint64(100 * time.Millisecond), Flags: captureUser}
	if err := m.budgets.Put(&bpf.SpanwatchBudgetKey{NameId: snapshot.NameID(span)}, &budget); err != nil {
		t.Fatal(err)
	}
	now, _ := monotonicNs()
	key := bpf.UsdtUsdtInflightKey{Source: 7, Tgid: pid, Key: uint64(pid)}
	if err := m.inflight.Put(&key, &bpf.UsdtUsdtInflight{StartNs: now - uint64(2*time.Second)}); err != nil {
		t.Fatal(err)
	}
}
