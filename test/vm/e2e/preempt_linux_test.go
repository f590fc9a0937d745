//go:build linux

package e2e

import (
	"fmt"
	"os"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/spanwatch/spanwatch/collector"
	"github.com/spanwatch/spanwatch/emit"
)

// TestExactUnderPreemption emits spans through user_events from threads
// all pinned to one CPU, for 5 s, with snapshots every 100 ms, on the VM
// kernel built with full preemption (CONFIG_PREEMPT=y), where the fentry
// program on perf_tp_event can be preempted mid-run by another thread's
// run on the same CPU: the totals over every window equal what was
// emitted, per series, and nothing is lost. (The series core updates
// everything with atomic instructions; a per-CPU `++` would lose counts
// here.)
func TestExactUnderPreemption(t *testing.T) {
	require(t)
	if ver := kernelPreemption(); os.Getenv(inVM) == "1" && !strings.Contains(ver, " PREEMPT ") {
		t.Fatalf("the VM kernel (%q) is not built with full preemption (CONFIG_PREEMPT=y): this test would prove little", ver)
	}
	c := newCollector(t, collector.Config{})
	const threads = 6
	names := []string{"preempt.a", "preempt.b", "preempt.c"}
	counts := make([]atomic.Uint64, threads)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for i := 0; i < threads; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			var set unix.CPUSet
			set.Set(0)
			if err := unix.SchedSetaffinity(0, &set); err != nil {
				t.Errorf("pin to CPU 0: %v", err)
				return
			}
			f := &emit.Finished{Name: names[i%len(names)], Duration: time.Duration(i+1) * time.Microsecond}
			for {
				select {
				case <-stop:
					return
				default:
				}
				for j := 0; j < 50; j++ {
					emit.Record(f)
				}
				counts[i].Add(50)
			}
		}(i)
	}
	total := map[string]want{}
	var lost uint64
	take := func() {
		got, s := snapshotSeries(t, c)
		lost += s.Stats.StatsFull + s.Stats.ReadErrors + s.Stats.ShortEvents + s.Stats.RecursionMisses
		for k, v := range got {
			w := total[k]
			w.count += v.count
			w.sumNs += v.sumNs
			total[k] = w
		}
	}
	for end := time.Now().Add(5 * time.Second); time.Now().Before(end); time.Sleep(100 * time.Millisecond) {
		take()
	}
	close(stop)
	wg.Wait()
	take()
	emitted := map[string]want{}
	var n uint64
	for i := range counts {
		k := names[i%len(names)]
		w := emitted[k]
		w.count += counts[i].Load()
		w.sumNs += counts[i].Load() * uint64(i+1) * 1000
		emitted[k] = w
		n += counts[i].Load()
	}
	for _, k := range names {
		if total[k] != emitted[k] {
			t.Errorf("%s: counted %+v, emitted %+v", k, total[k], emitted[k])
		}
	}
	if lost != 0 || emit.WriteErrors() != 0 {
		t.Errorf("%d values lost in the kernel, %d write errors in the SDK", lost, emit.WriteErrors())
	}
	t.Logf("%d spans from %d threads pinned to CPU 0 (%s), all counted", n, threads, kernelPreemption())
}

// kernelPreemption returns the kernel's version string (which names its
// preemption model: "SMP PREEMPT ...", "SMP PREEMPT_DYNAMIC ...").
func kernelPreemption() string {
	b, err := os.ReadFile("/proc/sys/kernel/version")
	if err != nil {
		return fmt.Sprint(err)
	}
	return strings.TrimSpace(string(b))
}
