//go:build linux

package overrun

import (
	"errors"
	"log/slog"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"github.com/cilium/ebpf/ringbuf"

	"github.com/spanwatch/spanwatch/bpf"
	"github.com/spanwatch/spanwatch/internal/logtest"
	"github.com/spanwatch/spanwatch/snapshot"
)

// fakeRing hands out the records and errors sent on it, one per ReadInto,
// and ringbuf.ErrClosed once closed, like a *ringbuf.Reader.
type fakeRing struct {
	next   chan any // []byte or error
	closed chan struct{}
	once   sync.Once
}

func newFakeRing() *fakeRing {
	return &fakeRing{next: make(chan any), closed: make(chan struct{})}
}

func (f *fakeRing) ReadInto(rec *ringbuf.Record) error {
	select {
	case <-f.closed:
		return ringbuf.ErrClosed
	case v := <-f.next:
		if err, ok := v.(error); ok {
			return err
		}
		rec.RawSample = v.([]byte)
		return nil
	}
}

func (f *fakeRing) Close() error {
	f.once.Do(func() { close(f.closed) })
	return nil
}

// countingSymbolizer counts the stacks it is asked to name.
type countingSymbolizer struct{ user atomic.Int64 }

func (s *countingSymbolizer) Capture(uint32) error { return nil }
func (s *countingSymbolizer) User(_ uint32, addrs []uint64) ([]snapshot.Frame, error) {
	s.user.Add(1)
	out := make([]snapshot.Frame, len(addrs))
	for i, a := range addrs {
		out[i] = snapshot.Frame{Addr: a, Function: "f"}
	}
	return out, nil
}
func (s *countingSymbolizer) Kernel([]uint64) ([]snapshot.Frame, error) { return nil, nil }

// rawOverrun makes an overrun record as the BPF programs write it: a span
// that ended (not an in-span sample) with a one-frame user stack.
func rawOverrun(pid uint32, name string) []byte {
	var r bpf.SpanwatchOverrun
	raw := make([]byte, unsafe.Sizeof(r))
	p := (*bpf.SpanwatchOverrun)(unsafe.Pointer(&raw[0]))
	p.Pid, p.Tid = pid, pid
	p.NameId = snapshot.NameID(name)
	copy(unsafe.Slice((*byte)(unsafe.Pointer(&p.Name[0])), len(p.Name)), name)
	p.DurationNs, p.BudgetNs = 2e6, 1e6
	p.Ustack[0], p.UstackLen = 0x401000, 8
	return raw
}

// TestOverrunReaderCloseDrains: Close waits for the reading goroutine and
// the worker, which first delivers what is queued; no goroutine is left.
func TestOverrunReaderCloseDrains(t *testing.T) {
	before := runtime.NumGoroutine()
	ring := newFakeRing()
	var delivered atomic.Int64
	release := make(chan struct{})
	o := NewQueue(ring, Config{
		Logger: slog.New(slog.DiscardHandler), Keep: 100, Queue: 8,
		Symbolizer: &countingSymbolizer{},
		OnOverrun: func(snapshot.Overrun) {
			<-release
			delivered.Add(1)
		},
	})
	o.Start()
	for i := 0; i < 5; i++ {
		ring.next <- rawOverrun(100, "test.close")
	}
	// Every record has been handed over; the worker is held in the
	// callback on the first, the others wait in the queue.
	done := make(chan struct{})
	go func() { o.Close(); close(done) }()
	close(release)
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("close did not return")
	}
	if got := delivered.Load(); got != 5 {
		t.Errorf("%d overruns delivered by close, want the 5 read", got)
	}
	ovs, dropped, queueDropped := o.Take()
	if len(ovs) != 5 || dropped != 0 || queueDropped != 0 {
		t.Errorf("took %d overruns, %d dropped, %d queue drops; want 5, 0, 0", len(ovs), dropped, queueDropped)
	}
	o.Close() // idempotent
	deadline := time.Now().Add(5 * time.Second)
	for runtime.NumGoroutine() > before && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if n := runtime.NumGoroutine(); n > before {
		buf := make([]byte, 1<<16)
		t.Fatalf("%d goroutines after close, %d before:\n%s", n, before, buf[:runtime.Stack(buf, true)])
	}
}

// TestOverrunDropBeforeSymbolize: with no OnOverrun, overruns past the
// snapshot's room are counted as dropped without naming their stacks.
func TestOverrunDropBeforeSymbolize(t *testing.T) {
	ring := newFakeRing()
	sym := &countingSymbolizer{}
	o := NewQueue(ring, Config{Logger: slog.New(slog.DiscardHandler), Keep: 2, Symbolizer: sym})
	o.Start()
	for i := 0; i < 5; i++ {
		ring.next <- rawOverrun(100, "test.drop")
	}
	o.Close()
	ovs, dropped, _ := o.Take()
	if len(ovs) != 2 || dropped != 3 {
		t.Errorf("kept %d, dropped %d; want 2 and 3", len(ovs), dropped)
	}
	if n := sym.user.Load(); n != 2 {
		t.Errorf("%d stacks symbolized, want 2 (those kept)", n)
	}
	for _, ov := range ovs {
		if ov.Span != "test.drop" || ov.PID != 100 || len(ov.UserStack) != 1 || ov.UserStack[0].Addr != 0x401000 {
			t.Errorf("overrun %+v", ov)
		}
	}
}

// TestOverrunReadBackoff: read errors other than a closed reader are
// retried after a pause that doubles up to a bound and starts again after
// a good read; each error is logged once, not once per retry.
func TestOverrunReadBackoff(t *testing.T) {
	ring := newFakeRing()
	logs := &logtest.Recorder{}
	o := NewQueue(ring, Config{Logger: slog.New(logs), Keep: 10, Symbolizer: &countingSymbolizer{}})
	var waits []time.Duration
	o.wait = func(d time.Duration) bool { waits = append(waits, d); return true }
	o.Start()
	errA, errB := errors.New("read a"), errors.New("read b")
	for i := 0; i < 3; i++ {
		ring.next <- errA
	}
	for i := 0; i < 8; i++ {
		ring.next <- errB
	}
	ring.next <- rawOverrun(1, "test.backoff")
	ring.next <- errA
	o.Close()
	ms := time.Millisecond
	want := []time.Duration{10 * ms, 20 * ms, 40 * ms, 80 * ms, 160 * ms, 320 * ms, 640 * ms, time.Second, time.Second, time.Second, time.Second, 10 * ms}
	if len(waits) != len(want) {
		t.Fatalf("waits %v, want %v", waits, want)
	}
	for i := range want {
		if waits[i] != want[i] {
			t.Fatalf("waits %v, want %v", waits, want)
		}
	}
	if n := logs.Count("overrun_read_failed"); n != 3 {
		t.Errorf("overrun_read_failed logged %d times, want 3 (a, b, a again after a good read)", n)
	}
	if n := logs.Count("overrun_read_recovered"); n != 1 {
		t.Errorf("overrun_read_recovered logged %d times, want 1", n)
	}
	if ovs, _, _ := o.Take(); len(ovs) != 1 {
		t.Errorf("%d overruns, want the 1 read between the errors", len(ovs))
	}
}

// TestOverrunReadBackoffStopsOnClose: a reader pausing after an error
// returns as soon as it is closed.
func TestOverrunReadBackoffStopsOnClose(t *testing.T) {
	ring := newFakeRing()
	o := NewQueue(ring, Config{Logger: slog.New(slog.DiscardHandler), Keep: 10, Symbolizer: &countingSymbolizer{}})
	waiting := make(chan struct{})
	o.wait = func(d time.Duration) bool {
		close(waiting)
		return o.sleep(time.Hour)
	}
	o.Start()
	ring.next <- errors.New("read failed")
	<-waiting
	done := make(chan struct{})
	go func() { o.Close(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("close waited for the backoff")
	}
}
