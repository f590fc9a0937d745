package detector

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"runtime/metrics"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/spanwatch/spanwatch/policy"
)

// TestPolicyMemoryFigures evaluates each hostile policy of
// policy/testdata/hostile through a detector with its defaults, over a
// series whose count a user drove to 10^8 and whose name is 100 bytes
// long, and prints the Go heap's and
// the process's peak growth during the evaluation, for BENCHMARKS.md. It
// only uses what the detector had before the memory bound, so the same
// file measures both. Run with SPANWATCH_POLICY_FIGURES=1 (under
// "prlimit --as=8589934592" where the unbounded figures could take the
// machine); each line is printed as soon as it is measured.
func TestPolicyMemoryFigures(t *testing.T) {
	if os.Getenv("SPANWATCH_POLICY_FIGURES") == "" {
		t.Skip("set SPANWATCH_POLICY_FIGURES=1 to measure")
	}
	files, err := filepath.Glob("../policy/testdata/hostile/*.rego")
	if err != nil || len(files) == 0 {
		t.Fatalf("no hostile policies: %v", err)
	}
	for _, f := range files {
		abs, _ := filepath.Abs(f)
		dir := writeFiles(t, map[string]string{"rules.yaml": "policies:\n  - file: " + abs + "\n"})
		cfg, err := policy.LoadFile(filepath.Join(dir, "rules.yaml"))
		if err != nil {
			t.Fatal(err)
		}
		d := New(Config{})
		d.SetRules(cfg)
		s := checkout(5 * time.Millisecond)
		s.Count, s.Span = 1e8, strings.Repeat("s", 100)
		runtime.GC()
		heap0, rss0 := figHeapMB(), figRSSMB()
		peak := figSampler()
		start := time.Now()
		_, err = d.Evaluate(context.Background(), snap(0, s))
		took := time.Since(start)
		heap, rss := peak()
		st := d.Stats()
		fmt.Fprintf(os.Stderr, "%-40s %6.2fs  heap peak +%5.0f MB  RSS peak +%5.0f MB  errors %d timeouts %d  err %v\n",
			filepath.Base(f), took.Seconds(), heap-heap0, rss-rss0, st.PolicyErrors, st.PolicyTimeouts, err)
	}
}

func figSampler() func() (heap, rss float64) {
	done := make(chan struct{})
	var ph, pr float64
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			ph, pr = max(ph, figHeapMB()), max(pr, figRSSMB())
			select {
			case <-done:
				return
			case <-time.After(time.Millisecond):
			}
		}
	}()
	return func() (float64, float64) { close(done); wg.Wait(); return ph, pr }
}

func figHeapMB() float64 {
	s := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
	metrics.Read(s)
	return float64(s[0].Value.Uint64()) / 1e6
}

func figRSSMB() float64 {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "VmRSS:"); ok {
			kb, _ := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 64)
			return kb / 1000
		}
	}
	return 0
}
