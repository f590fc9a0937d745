//go:build linux && amd64

package funcsbench

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/spanwatch/spanwatch/bench/internal/loopbench"
	"github.com/spanwatch/spanwatch/collector"
	"github.com/spanwatch/spanwatch/internal/glob"
	"github.com/spanwatch/spanwatch/source/function"
)

const (
	goCalls   = 100000 // calls of main.work per timed run
	goRounds  = 5      // rounds of the four runs, in rotating order
	goFunc    = "bench_go_func"
	goSDKSpan = "bench_go_sdk" // testdata/goloop's span name
)

// A goLoop is a running testdata/goloop: commands in, ns per call out.
type goLoop struct {
	cmd *exec.Cmd
	in  io.WriteCloser
	out *bufio.Scanner
}

func startGoLoop(b *testing.B, path string) *goLoop {
	b.Helper()
	cmd := exec.Command(path)
	// The SDK picks the marker on a kernel without user_events; forced so
	// that the comparison is the marker's on any kernel.
	cmd.Env = append(os.Environ(), "SPANWATCH_EMIT=marker")
	cmd.Stderr = os.Stderr
	in, err := cmd.StdinPipe()
	if err != nil {
		b.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	l := &goLoop{cmd: cmd, in: in, out: bufio.NewScanner(out)}
	b.Cleanup(func() { in.Close(); cmd.Wait() })
	return l
}

// run runs n calls in mode ("plain" or "sdk") and returns ns per call.
func (l *goLoop) run(b *testing.B, mode string, n int) float64 {
	b.Helper()
	if _, err := fmt.Fprintf(l.in, "%s %d\n", mode, n); err != nil {
		b.Fatal(err)
	}
	if !l.out.Scan() {
		b.Fatalf("goloop ended: %v", l.out.Err())
	}
	f, err := strconv.ParseFloat(strings.TrimSpace(l.out.Text()), 64)
	if err != nil {
		b.Fatalf("goloop printed %q", l.out.Text())
	}
	return f
}

// BenchmarkGoFuncVsSDK measures issue 26's second cost figure: a Go
// function traced by the function source (a uprobe on main.work's entry
// and one on its return, paired by goroutine) against the same work inside
// a span of the Go SDK (emit.Start, End) with the agent listening through
// the marker (two marker hits a span: the start event and the span), in
// one run. Three copies of testdata/goloop run at once: the bare one, the
// one whose work the function source traces, and the one whose SDK the
// marker source listens to. Each round runs, in rotating order: work
// bare; the SDK's spans with no agent listening (the bare copy: its
// marker is not probed); work traced; the SDK's spans listened to. Added
// time per call is against work bare; the ratio is the median of the
// per-round ratios. Program cost is the kernel's run_time_ns / run_cnt
// (func_entry + func_return per call, uprobe_marker twice a span). Both
// sources' span counts are checked exact. Run with -benchtime 1x.
func BenchmarkGoFuncVsSDK(b *testing.B) {
	if os.Geteuid() != 0 {
		b.Skip("needs root: BPF, uprobes and kernel BPF statistics")
	}
	goTool, err := exec.LookPath("go")
	if err != nil {
		b.Skip("no go on PATH to build testdata/goloop")
	}
	bin := filepath.Join(b.TempDir(), "goloop")
	if out, err := exec.Command(goTool, "build", "-o", bin, "./testdata/goloop").CombinedOutput(); err != nil {
		b.Fatalf("go build: %v: %s", err, out)
	}
	defer loopbench.EnableStats(b).Close()
	for i := 0; i < b.N; i++ {
		base, funcCopy, sdkCopy := loopbench.Copies(b, bin)
		ctx := context.Background()
		col, err := collector.New(ctx, collector.Config{Sources: collector.Sources{Marker: true}, ScanInterval: -1, MarkerBinaries: []string{sdkCopy}})
		if err != nil {
			b.Fatal(err)
		}
		g, err := glob.Compile("main.work")
		if err != nil {
			b.Fatal(err)
		}
		src, err := function.Attach(ctx, col.SourceCore(), []function.Target{{Binary: funcCopy, Functions: g, Span: goFunc}})
		if err != nil {
			col.Close()
			b.Fatal(err)
		}
		progs := programsNamed(os.Getpid(), func(n string) bool {
			return n == "func_entry" || n == "func_return" || n == "uprobe_marker"
		})
		if progs["func_entry"] == nil || progs["func_return"] == nil || progs["uprobe_marker"] == nil {
			b.Fatalf("programs not found: %v", progs)
		}
		bare, traced, listened := startGoLoop(b, base), startGoLoop(b, funcCopy), startGoLoop(b, sdkCopy)
		// Warm up each (page faults, the first hits); counted below.
		bare.run(b, "plain", 1000)
		bare.run(b, "sdk", 1000)
		traced.run(b, "plain", 1000)
		listened.run(b, "sdk", 1000)
		e0, r0, m0 := loopbench.Stats(b, progs["func_entry"]), loopbench.Stats(b, progs["func_return"]), loopbench.Stats(b, progs["uprobe_marker"])
		var plains, idles, funcs, sdks, ratios []float64
		for k := 0; k < goRounds; k++ {
			var x [4]float64
			for j := 0; j < 4; j++ {
				switch (j + k) % 4 {
				case 0:
					x[0] = bare.run(b, "plain", goCalls)
				case 1:
					x[1] = bare.run(b, "sdk", goCalls)
				case 2:
					x[2] = traced.run(b, "plain", goCalls)
				case 3:
					x[3] = listened.run(b, "sdk", goCalls)
				}
			}
			plains, idles, funcs, sdks = append(plains, x[0]), append(idles, x[1]), append(funcs, x[2]), append(sdks, x[3])
			ratios = append(ratios, (x[2]-x[0])/(x[3]-x[0]))
		}
		e1, r1, m1 := loopbench.Stats(b, progs["func_entry"]), loopbench.Stats(b, progs["func_return"]), loopbench.Stats(b, progs["uprobe_marker"])
		snap, err := col.Snapshot()
		if err != nil {
			b.Fatal(err)
		}
		counts := map[string]uint64{}
		for _, s := range snap.Series {
			counts[s.Span] += s.Count
		}
		want := uint64(1000 + goRounds*goCalls)
		if counts[goFunc] != want || counts[goSDKSpan] != want {
			b.Fatalf("spans: function source %d, SDK %d; want %d each", counts[goFunc], counts[goSDKSpan], want)
		}
		if c, err := src.Counts(); err != nil || len(c) != 0 {
			b.Errorf("function source counters %v (%v), want none", c, err)
		}
		for _, p := range progs {
			p.Close()
		}
		src.Close()
		col.Close()

		sorted := append([]float64(nil), ratios...)
		sort.Float64s(sorted)
		plain, idle, fn, sd := loopbench.Median(plains), loopbench.Median(idles), loopbench.Median(funcs), loopbench.Median(sdks)
		fnProg := e1.Sub(e0).PerRun() + r1.Sub(r0).PerRun()
		sdkProg := 2 * m1.Sub(m0).PerRun()
		b.ReportMetric(fn-plain, "func-added-ns/call")
		b.ReportMetric(sd-plain, "sdk-added-ns/span")
		b.ReportMetric(idle-plain, "sdk-idle-ns/span")
		b.ReportMetric(loopbench.Median(ratios), "added-ratio")
		b.ReportMetric(fnProg, "func-prog-ns/call")
		b.ReportMetric(sdkProg, "sdk-prog-ns/span")
		b.Logf("median ns per call over %d rounds of %d: work bare %.1f, SDK span idle %.1f, work traced %.0f, SDK span listened to %.0f", goRounds, goCalls, plain, idle, fn, sd)
		b.Logf("added per call: function source %.0f ns, SDK span %.0f ns; median per-round ratio %.2f (range %.2f-%.2f)", fn-plain, sd-plain, loopbench.Median(ratios), sorted[0], sorted[len(sorted)-1])
		b.Logf("BPF programs per call: function source %.0f ns (entry + return), SDK %.0f ns (marker, start + end)", fnProg, sdkProg)
	}
}
