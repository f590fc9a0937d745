//go:build linux

package collector

import (
	"context"
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
	"github.com/spanwatch/spanwatch/emit"
	"github.com/spanwatch/spanwatch/internal/cgroup"
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

// logMessages records the messages logged.
type logMessages struct {
	mu   sync.Mutex
	msgs []string
}

func (l *logMessages) Enabled(context.Context, slog.Level) bool { return true }
func (l *logMessages) Handle(_ context.Context, r slog.Record) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.msgs = append(l.msgs, r.Message)
	return nil
}
func (l *logMessages) WithAttrs([]slog.Attr) slog.Handler { return l }
func (l *logMessages) WithGroup(string) slog.Handler      { return l }

func (l *logMessages) count(msg string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, m := range l.msgs {
		if m == msg {
			n++
		}
	}
	return n
}

// TestOverrunReaderCloseDrains: Close waits for the reading goroutine and
// the worker, which first delivers what is queued; no goroutine is left.
func TestOverrunReaderCloseDrains(t *testing.T) {
	before := runtime.NumGoroutine()
	ring := newFakeRing()
	var delivered atomic.Int64
	release := make(chan struct{})
	o := newOverrunQueue(ring, Config{
		Logger: slog.New(slog.DiscardHandler), MaxOverrunsPerSnapshot: 100, OverrunQueue: 8,
		Symbolizer: &countingSymbolizer{},
		OnOverrun: func(snapshot.Overrun) {
			<-release
			delivered.Add(1)
		},
	}, nil)
	o.start()
	for i := 0; i < 5; i++ {
		ring.next <- rawOverrun(100, "test.close")
	}
	// Every record has been handed over; the worker is held in the
	// callback on the first, the others wait in the queue.
	done := make(chan struct{})
	go func() { o.close(); close(done) }()
	close(release)
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("close did not return")
	}
	if got := delivered.Load(); got != 5 {
		t.Errorf("%d overruns delivered by close, want the 5 read", got)
	}
	ovs, dropped, queueDropped := o.take()
	if len(ovs) != 5 || dropped != 0 || queueDropped != 0 {
		t.Errorf("took %d overruns, %d dropped, %d queue drops; want 5, 0, 0", len(ovs), dropped, queueDropped)
	}
	o.close() // idempotent
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
	o := newOverrunQueue(ring, Config{Logger: slog.New(slog.DiscardHandler), MaxOverrunsPerSnapshot: 2, Symbolizer: sym}, nil)
	o.start()
	for i := 0; i < 5; i++ {
		ring.next <- rawOverrun(100, "test.drop")
	}
	o.close()
	ovs, dropped, _ := o.take()
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
	logs := &logMessages{}
	o := newOverrunQueue(ring, Config{Logger: slog.New(logs), MaxOverrunsPerSnapshot: 10, Symbolizer: &countingSymbolizer{}}, nil)
	var waits []time.Duration
	o.wait = func(d time.Duration) bool { waits = append(waits, d); return true }
	o.start()
	errA, errB := errors.New("read a"), errors.New("read b")
	for i := 0; i < 3; i++ {
		ring.next <- errA
	}
	for i := 0; i < 8; i++ {
		ring.next <- errB
	}
	ring.next <- rawOverrun(1, "test.backoff")
	ring.next <- errA
	o.close()
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
	if n := logs.count("overrun_read_failed"); n != 3 {
		t.Errorf("overrun_read_failed logged %d times, want 3 (a, b, a again after a good read)", n)
	}
	if n := logs.count("overrun_read_recovered"); n != 1 {
		t.Errorf("overrun_read_recovered logged %d times, want 1", n)
	}
	if ovs, _, _ := o.take(); len(ovs) != 1 {
		t.Errorf("%d overruns, want the 1 read between the errors", len(ovs))
	}
}

// TestOverrunReadBackoffStopsOnClose: a reader pausing after an error
// returns as soon as it is closed.
func TestOverrunReadBackoffStopsOnClose(t *testing.T) {
	ring := newFakeRing()
	o := newOverrunQueue(ring, Config{Logger: slog.New(slog.DiscardHandler), MaxOverrunsPerSnapshot: 10, Symbolizer: &countingSymbolizer{}}, nil)
	waiting := make(chan struct{})
	o.wait = func(d time.Duration) bool {
		close(waiting)
		return o.sleep(time.Hour)
	}
	o.start()
	ring.next <- errors.New("read failed")
	<-waiting
	done := make(chan struct{})
	go func() { o.close(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("close waited for the backoff")
	}
}

// TestBlockedOnOverrunKeepsReading: while OnOverrun blocks (a slow disk
// behind the agent's outbox), the ring buffer is still read: records past
// the queue are counted in OverrunsQueueDropped and the kernel drops none.
// The ring buffer holds about 36 records; 400 pass through it.
func TestBlockedOnOverrunKeepsReading(t *testing.T) {
	const queue, total, batch = 8, 400, 16
	entered := make(chan struct{}, 1)
	release := make(chan struct{})
	var delivered atomic.Int64
	c := newMarkerCollector(t, Config{
		RingbufBytes: 64 << 10, OverrunQueue: queue, MaxOverrunsPerSnapshot: total,
		Inflight: InflightConfig{Off: true},
		OnOverrun: func(ov snapshot.Overrun) {
			if ov.Span != "test.queue" {
				return
			}
			select {
			case entered <- struct{}{}:
			default:
			}
			<-release
			delivered.Add(1)
		},
	})
	defer close(release)
	if err := c.SetBudgets([]BudgetRule{{Span: "test.queue", Budget: time.Millisecond}}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Snapshot(); err != nil {
		t.Fatal(err)
	}
	f := &emit.Finished{Name: "test.queue", Duration: 2 * time.Millisecond}
	waitRead := func(n uint64) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for c.rb.read.Load() < n {
			if time.Now().After(deadline) {
				t.Fatalf("the reader stopped at %d of %d records while OnOverrun blocks", c.rb.read.Load(), n)
			}
			time.Sleep(time.Millisecond)
		}
	}
	// The first record takes the worker into the blocking callback.
	emit.Record(f)
	select {
	case <-entered:
	case <-time.After(10 * time.Second):
		t.Fatal("no overrun reached OnOverrun")
	}
	// In batches well under the ring buffer's size, each read before the
	// next is sent: a reader that keeps reading loses nothing in the
	// kernel, however the machine schedules it.
	for sent := 1; sent < total; {
		for i := 0; i < batch && sent < total; i++ {
			emit.Record(f)
			sent++
		}
		waitRead(uint64(sent))
	}
	s, err := c.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%d overruns while OnOverrun blocked: %d read, %d queue drops, %d ring buffer drops",
		total, c.rb.read.Load(), s.Stats.OverrunsQueueDropped, s.Stats.RingbufDrops)
	if s.Stats.RingbufDrops != 0 {
		t.Errorf("%d ring buffer drops while OnOverrun blocked, want 0", s.Stats.RingbufDrops)
	}
	if got, want := s.Stats.OverrunsQueueDropped, uint64(total-1-queue); got != want {
		t.Errorf("%d queue drops, want %d (all but the one in OnOverrun and the %d queued)", got, want, queue)
	}
	// Released, the worker delivers the one it held and the queued ones.
	release <- struct{}{}
	for i := 0; i < queue; i++ {
		release <- struct{}{}
	}
	deadline := time.Now().Add(10 * time.Second)
	for delivered.Load() < 1+queue && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	if got := delivered.Load(); got != 1+queue {
		t.Errorf("%d delivered after release, want %d", got, 1+queue)
	}
}

// fixedResolver names every cgroup the same way.
type fixedResolver cgroup.Info

func (f fixedResolver) Resolve(uint64) cgroup.Info { return cgroup.Info(f) }

// TestOverrunNamesItsSeries checks that an overrun gets every name its
// series gets from the same cgroup, Process included: the labels the
// metrics exporter finds the overrun's series by, to put its trace id on
// it as an exemplar. The overrun is named as the overrun reader names it
// (resolveCgroup), the series as Snapshot names it.
func TestOverrunNamesItsSeries(t *testing.T) {
	info := cgroup.Info{Path: "/kubepods.slice/pod1/ctr1", ContainerID: "ctr1", PodUID: "pod1", Unit: "u.service",
		Namespace: "shop", Pod: "web-0", Container: "server", Process: "web"}
	var sr snapshot.Series
	ov := snapshot.Overrun{CgroupID: 7}
	sr.Identity = identity(info)
	(&overrunReader{cfg: Config{Resolver: fixedResolver(info)}}).resolveCgroup(&ov)
	got := [...]string{ov.Cgroup, ov.ContainerID, ov.PodUID, ov.Unit, ov.Namespace, ov.Pod, ov.Container, ov.Process}
	want := [...]string{sr.Cgroup, sr.ContainerID, sr.PodUID, sr.Unit, sr.Namespace, sr.Pod, sr.Container, sr.Process}
	if got != want || want[7] != "web" || want[0] != info.Path {
		t.Errorf("overrun named %q, its series %q", got, want)
	}
}
