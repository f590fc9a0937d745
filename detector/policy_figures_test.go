package detector

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/spanwatch/spanwatch/internal/memtest"
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
		heap0, rss0 := memtest.Heap(), memtest.RSS()
		peak := memtest.Peaks(time.Millisecond)
		start := time.Now()
		_, err = d.Evaluate(context.Background(), snap(0, s))
		took := time.Since(start)
		rss, heap := peak()
		st := d.Stats()
		fmt.Fprintf(os.Stderr, "%-40s %6.2fs  heap peak +%5.0f MB  RSS peak +%5.0f MB  errors %d timeouts %d  err %v\n",
			filepath.Base(f), took.Seconds(), float64(heap-heap0)/1e6, float64(rss-rss0)/1e6, st.PolicyErrors, st.PolicyTimeouts, err)
	}
}
