//go:build linux

package collector

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/spanwatch/spanwatch/emit"
	"github.com/spanwatch/spanwatch/internal/cgroup"
	"github.com/spanwatch/spanwatch/snapshot"
)

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
		for c.rb.Read() < n {
			if time.Now().After(deadline) {
				t.Fatalf("the reader stopped at %d of %d records while OnOverrun blocks", c.rb.Read(), n)
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
		total, c.rb.Read(), s.Stats.OverrunsQueueDropped, s.Stats.RingbufDrops)
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
// (overrunConfig's Identify), the series as Snapshot names it.
func TestOverrunNamesItsSeries(t *testing.T) {
	info := cgroup.Info{Path: "/kubepods.slice/pod1/ctr1", ContainerID: "ctr1", PodUID: "pod1", Unit: "u.service",
		Namespace: "shop", Pod: "web-0", Container: "server", Process: "web"}
	var sr snapshot.Series
	ov := snapshot.Overrun{CgroupID: 7}
	sr.Identity = identity(info)
	ov.Identity = (&Collector{cfg: Config{Resolver: fixedResolver(info)}}).overrunConfig().Identify(ov.CgroupID, 0)
	got := [...]string{ov.Cgroup, ov.ContainerID, ov.PodUID, ov.Unit, ov.Namespace, ov.Pod, ov.Container, ov.Process}
	want := [...]string{sr.Cgroup, sr.ContainerID, sr.PodUID, sr.Unit, sr.Namespace, sr.Pod, sr.Container, sr.Process}
	if got != want || want[7] != "web" || want[0] != info.Path {
		t.Errorf("overrun named %q, its series %q", got, want)
	}
}
