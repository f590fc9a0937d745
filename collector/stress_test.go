//go:build linux

package collector

import (
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/spanwatch/spanwatch/internal/kernel"

	"golang.org/x/sys/unix"

	"github.com/spanwatch/spanwatch/emit"
)

// TestMarkerExactUnderLoad emits spans from goroutines whose threads are
// all pinned to one CPU (so program runs of different threads interleave
// on that CPU, preemption included where the kernel preempts) and from one
// unpinned goroutine, for 10 s (2 s with -short), while snapshots are taken
// every 100 ms: the totals over all windows equal what was emitted, per
// series and in sum, with nothing lost.
func TestMarkerExactUnderLoad(t *testing.T) {
	c := newMarkerCollector(t, Config{})
	dur := 10 * time.Second
	if testing.Short() {
		dur = 2 * time.Second
	}
	const pinned = 6
	type stream struct {
		name string
		d    time.Duration
		n    atomic.Uint64
	}
	streams := make([]*stream, pinned+1)
	for i := range streams {
		// Two goroutines share each name, so series are contended too.
		streams[i] = &stream{name: fmt.Sprintf("stress.%d", i/2), d: time.Duration(i+1) * time.Microsecond}
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for i, s := range streams {
		wg.Add(1)
		go func(pin bool, s *stream) {
			defer wg.Done()
			// Locked and never unlocked: the pinned thread ends with the
			// goroutine instead of going back to the runtime pinned.
			runtime.LockOSThread()
			if pin {
				var set unix.CPUSet
				set.Set(0)
				if err := unix.SchedSetaffinity(0, &set); err != nil {
					t.Errorf("pin to CPU 0: %v", err)
					return
				}
			}
			f := &emit.Finished{Name: s.name, Duration: s.d}
			for {
				select {
				case <-stop:
					return
				default:
				}
				for j := 0; j < 100; j++ {
					emit.Record(f)
				}
				s.n.Add(100)
			}
		}(i < pinned, s)
	}
	type tot struct{ count, sum uint64 }
	got := map[string]*tot{}
	var lost, statsFull, readErrors, histFull uint64
	take := func() {
		s, err := c.Snapshot()
		if err != nil {
			t.Fatal(err)
		}
		lost += s.Stats.StatsFull + s.Stats.ReadErrors + s.Stats.HistogramFull
		statsFull, readErrors, histFull = statsFull+s.Stats.StatsFull, readErrors+s.Stats.ReadErrors, histFull+s.Stats.HistogramFull
		for _, sr := range s.Series {
			if got[sr.Span] == nil {
				got[sr.Span] = &tot{}
			}
			got[sr.Span].count += sr.Count
			got[sr.Span].sum += sr.SumNs
		}
	}
	deadline := time.Now().Add(dur)
	for time.Now().Before(deadline) {
		time.Sleep(100 * time.Millisecond)
		take()
	}
	close(stop)
	wg.Wait()
	take()
	want := map[string]*tot{}
	var total uint64
	for _, s := range streams {
		if want[s.name] == nil {
			want[s.name] = &tot{}
		}
		n := s.n.Load()
		want[s.name].count += n
		want[s.name].sum += n * uint64(s.d)
		total += n
	}
	// The full core counts every value. The compat core (5.10 to 5.16)
	// lost one value in 871,500 once in the kernel matrix (Debian's
	// 5.10, 6 threads pinned to one CPU), and counted the loss: there a
	// value may be missing from the counts only if the loss counters
	// hold it. The cause is not found yet (see the issue 29 note).
	compat := c.Kernel().Core == kernel.CoreCompat
	var missing uint64
	for name, w := range want {
		// A name whose goroutines never ran (a loaded machine, under
		// the race detector: 6 threads pinned to one CPU for 2 s) has
		// no series, and emitted nothing.
		g := got[name]
		if g == nil {
			g = &tot{}
		}
		if g.count > w.count || g.sum > w.sum || (g.count != w.count || g.sum != w.sum) && !compat {
			t.Errorf("%s: counted %+v, emitted %+v", name, g, w)
		}
		missing += w.count - min(g.count, w.count)
	}
	switch {
	case !compat && lost != 0:
		t.Errorf("%d values lost (stats full %d, read errors %d, histogram full %d)", lost, statsFull, readErrors, histFull)
	case compat && missing != lost:
		t.Errorf("compat core: %d values missing from the counts, %d counted as lost", missing, lost)
	case lost != 0:
		t.Logf("compat core: %d values lost, every one counted as lost", lost)
	}
	t.Logf("%d spans from %d goroutines (%d pinned to CPU 0) in %s, all counted", total, len(streams), pinned, dur)
}
