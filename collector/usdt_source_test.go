//go:build linux

package collector

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	usdtsource "github.com/spanwatch/spanwatch/source/usdt"

	"github.com/spanwatch/spanwatch/internal/bpftest"
	"github.com/spanwatch/spanwatch/internal/kernel"
	"github.com/spanwatch/spanwatch/internal/usdt"
	"github.com/spanwatch/spanwatch/snapshot"
)

// buildSDTSpan builds internal/usdt/testdata/sdtspan.c with frame pointers,
// or skips when gcc or sys/sdt.h is missing.
func buildSDTSpan(t *testing.T) string {
	t.Helper()
	return bpftest.CProgram(t, "sdtspan")
}

// quantileOf is snapshot.Quantile's rank rule over exact values.
func quantileOf(sorted []uint64, q float64) uint64 {
	rank := uint64(q*float64(len(sorted)) + 0.5)
	if rank < 1 {
		rank = 1
	}
	if rank > uint64(len(sorted)) {
		rank = uint64(len(sorted))
	}
	return sorted[rank-1]
}

// TestUSDTSpans runs start/done pairs (by thread and by a key argument) and
// single probes with durations the test program controls, and expects the
// collector's snapshot to hold each span name with the right count, errors
// and quantiles (within the histogram's 6.25% of the durations the program
// measured around its probes), and over-budget spans to send overrun
// records with user stacks.
func TestUSDTSpans(t *testing.T) {
	prog := buildSDTSpan(t)
	requireBPF(t)
	cookies := kernel.Probe().Has(kernel.AttachCookie)
	auto := Config{}
	t.Run("default", func(t *testing.T) {
		testUSDTSpans(t, prog, auto, cookies, func(c *Collector, srcs []usdt.SpanSource) (*usdtsource.Source, error) {
			tr, err := usdtsource.Attach(context.Background(), c.SourceCore(), srcs)
			if err == nil && HaveUprobeMulti() && tr.UprobeMethod() != "uprobe_multi" {
				tr.Close()
				return nil, fmt.Errorf("tracer attaches through %q where the kernel has uprobe_multi links", tr.UprobeMethod())
			}
			return tr, err
		})
	})
	// As on kernels before 6.6: call sites through the perf_uprobe PMU.
	t.Run("perf", func(t *testing.T) {
		testUSDTSpans(t, prog, auto, cookies, func(c *Collector, srcs []usdt.SpanSource) (*usdtsource.Source, error) {
			tr, err := usdt.NewTracer(usdt.TracerConfig{Maps: c.Maps(), Core: c.Kernel().Core, NoUprobeMulti: true})
			if err != nil {
				return nil, err
			}
			if m := tr.UprobeMethod(); m != "perf" {
				tr.Close()
				return nil, fmt.Errorf("NoUprobeMulti tracer attaches through %q, want perf", m)
			}
			for _, s := range srcs {
				if err := tr.Add(context.Background(), s); err != nil {
					tr.Close()
					return nil, err
				}
			}
			return &usdtsource.Source{Tracer: tr}, nil
		})
	})
	// As on kernels without sleepable uprobes (before 6.0): names read
	// by ordinary programs, and through /proc/PID/mem by the tracer when
	// their page is not resident.
	t.Run("no-sleepable", func(t *testing.T) {
		testUSDTSpans(t, prog, auto, cookies, func(c *Collector, srcs []usdt.SpanSource) (*usdtsource.Source, error) {
			return usdtsource.AttachWith(context.Background(), c.SourceCore(), usdt.TracerConfig{NoSleepable: true}, srcs)
		})
	})
	// As on kernels before 6.12: sleepable programs fault the page in
	// with bpf_copy_from_user instead of the string kfunc.
	t.Run("copy-from-user", func(t *testing.T) {
		bpftest.Require(t, kernel.SleepableUprobe)
		testUSDTSpans(t, prog, auto, cookies, func(c *Collector, srcs []usdt.SpanSource) (*usdtsource.Source, error) {
			tr, err := usdtsource.AttachWith(context.Background(), c.SourceCore(), usdt.TracerConfig{NoStrKfunc: true}, srcs)
			if err == nil && tr.NameMethod() != "copy_from_user" {
				tr.Close()
				return nil, fmt.Errorf("NoStrKfunc tracer reads names with %s", tr.NameMethod())
			}
			return tr, err
		})
	})
	// The compat objects (5.10 to 5.16) on this kernel: thread stacks in
	// a hash, no sleepable programs; and without cookies, as on 5.10 to
	// 5.14: sites told apart by their place in the executable's code.
	compat := Config{Core: kernel.CoreCompat}
	t.Run("compat", func(t *testing.T) {
		testUSDTSpans(t, prog, compat, cookies, func(c *Collector, srcs []usdt.SpanSource) (*usdtsource.Source, error) {
			return usdtsource.Attach(context.Background(), c.SourceCore(), srcs)
		})
	})
	t.Run("compat-no-cookies", func(t *testing.T) {
		testUSDTSpans(t, prog, compat, false, func(c *Collector, srcs []usdt.SpanSource) (*usdtsource.Source, error) {
			tr, err := usdtsource.AttachWith(context.Background(), c.SourceCore(), usdt.TracerConfig{NoCookies: true}, srcs)
			if err == nil && tr.HaveCookie() {
				tr.Close()
				return nil, errors.New("NoCookies tracer uses cookies")
			}
			return tr, err
		})
	})
}

// testUSDTSpans runs the test program under a collector of cfg. Without
// cookies a call site feeds one source, so the sources that share sites
// with others (tspan_fast, single_pid) are left out.
func testUSDTSpans(t *testing.T, prog string, cfg Config, cookies bool, attach func(*Collector, []usdt.SpanSource) (*usdtsource.Source, error)) {
	cfg.Sources, cfg.ScanInterval = Sources{Marker: true}, -1
	c, err := New(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()

	const iter, baseUs = 40, 2000
	cmd := exec.Command(prog, strconv.Itoa(iter), strconv.Itoa(baseUs))
	stdin, _ := cmd.StdinPipe()
	stdout, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	out := bufio.NewScanner(stdout)
	if !out.Scan() || out.Text() != "ready" {
		t.Fatalf("program said %q, want ready", out.Text())
	}

	sources := []usdt.SpanSource{
		{
			Binary: prog, Span: "tspan", NameArg: -1, KeyArg: -1, StatusArg: 0, DurationArg: -1,
			Start: usdt.ProbeRef{Provider: "sw", Name: "t_start"}, End: usdt.ProbeRef{Provider: "sw", Name: "t_done"},
		},
		// The same probes again, without a status: the fast path (task
		// slot in the cookie, per-CPU span template).
		{
			Binary: prog, Span: "tspan_fast", NameArg: -1, KeyArg: -1, StatusArg: -1, DurationArg: -1,
			Start: usdt.ProbeRef{Provider: "sw", Name: "t_start"}, End: usdt.ProbeRef{Provider: "sw", Name: "t_done"},
		},
		{
			PID: cmd.Process.Pid, NameArg: 1, KeyArg: 0, StatusArg: 1, DurationArg: -1,
			Start: usdt.ProbeRef{Provider: "sw", Name: "k_start"}, End: usdt.ProbeRef{Provider: "sw", Name: "k_done"},
		},
		{
			Binary: prog, NameArg: 0, KeyArg: -1, StatusArg: 2, DurationArg: 1,
			Probe: usdt.ProbeRef{Provider: "sw", Name: "single"},
		},
		// The same probe through the process: its executable is also
		// among its mapped files, and must be attached once.
		{
			PID: cmd.Process.Pid, Span: "single_pid", NameArg: -1, KeyArg: -1, StatusArg: 2, DurationArg: 1,
			Probe: usdt.ProbeRef{Provider: "sw", Name: "single"},
		},
	}
	if !cookies {
		sources = slices.DeleteFunc(sources, func(s usdt.SpanSource) bool { return s.Span == "tspan_fast" || s.Span == "single_pid" })
	}
	tr, err := attach(c, sources)
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	budget := time.Duration(baseUs*7/2) * time.Microsecond
	if err := c.SetBudgets([]BudgetRule{{Span: "tspan", Budget: budget}}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Snapshot(); err != nil { // start a fresh window
		t.Fatal(err)
	}

	io.WriteString(stdin, "go\n")
	// Each span's duration as the program saw it from just inside and
	// just outside its two probes: what BPF measures lies in between.
	inner, outer := map[string][]uint64{}, map[string][]uint64{}
	for out.Scan() && out.Text() != "done" {
		f := strings.Fields(out.Text())
		in, _ := strconv.ParseUint(f[1], 10, 64)
		o, _ := strconv.ParseUint(f[2], 10, 64)
		inner[f[0]] = append(inner[f[0]], in)
		outer[f[0]] = append(outer[f[0]], o)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatal(err)
	}
	// Each end or single probe hit counts once for each source on it.
	hs, err := tr.Hits()
	if err != nil {
		t.Fatal(err)
	}
	if len(hs) != len(sources) {
		t.Errorf("hits of %d sources, want %d", len(hs), len(sources))
	}
	for _, h := range hs {
		if h.Hits != iter || h.Sites == 0 {
			t.Errorf("%s: %d hits at %d sites, want %d", h.Source.Describe(), h.Hits, h.Sites, iter)
		}
	}
	for i := 0; i < iter; i++ {
		inner["s"] = append(inner["s"], uint64(1000*(i+1)))
		outer["s"] = append(outer["s"], uint64(1000*(i+1)))
	}

	// Overrun records arrive through the ring buffer: gather them over a
	// few snapshots, and the series from the first.
	minOver, maxOver := 0, 0
	for i := range inner["t"] {
		if inner["t"][i] > uint64(budget) {
			minOver++
		}
		if outer["t"][i] > uint64(budget) {
			maxOver++
		}
	}
	var series map[string]snapshot.Series
	var overruns []snapshot.Overrun
	// Overruns reach the snapshot once symbolized: seconds under -race on
	// a busy machine. The loop ends as soon as they are all in.
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		s, err := c.Snapshot()
		if err != nil {
			t.Fatal(err)
		}
		if series == nil {
			series = seriesByName(s)
		}
		overruns = append(overruns, s.Overruns...)
		if series != nil && len(overruns) >= int(series["tspan"].OverBudget) && len(overruns) >= minOver {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}

	for _, tc := range []struct {
		span, key string
		errors    uint64
	}{
		{"tspan", "t", iter / 5},
		{"tspan_fast", "t", 0},
		{"keyed", "k", 0},
		{"single", "s", iter / 2},
		{"single_pid", "s", iter / 2},
	} {
		if !cookies && (tc.span == "tspan_fast" || tc.span == "single_pid") {
			continue
		}
		sr, ok := series[tc.span]
		if !ok {
			t.Errorf("no series %q in the snapshot (have %v)", tc.span, keys(series))
			continue
		}
		lo, hi := sorted(inner[tc.key]), sorted(outer[tc.key])
		if sr.Count != uint64(len(lo)) || sr.Count != iter {
			t.Errorf("%s: count %d, want %d", tc.span, sr.Count, len(lo))
		}
		if sr.Errors != tc.errors {
			t.Errorf("%s: errors %d, want %d", tc.span, sr.Errors, tc.errors)
		}
		for _, q := range []struct {
			name string
			q    float64
			got  uint64
		}{{"p50", 0.5, sr.P50Ns}, {"p90", 0.9, sr.P90Ns}, {"p99", 0.99, sr.P99Ns}} {
			// Each span's BPF duration is within [inner, outer], so its
			// quantile is within the same quantiles of those, and the
			// histogram's estimate within 6.25% of that.
			wlo, whi := float64(quantileOf(lo, q.q))*(1-0.0625), float64(quantileOf(hi, q.q))*(1+0.0625)
			if g := float64(q.got); g < wlo || g > whi {
				t.Errorf("%s %s = %d ns, want within [%.0f, %.0f] (measured around the probes, ±6.25%%)", tc.span, q.name, q.got, wlo, whi)
			}
		}
	}

	overBudget := int(series["tspan"].OverBudget)
	if overBudget < minOver || overBudget > maxOver || overBudget == 0 {
		t.Errorf("tspan over budget %d, want %d..%d (spans over %s seen from inside and outside the probes)", overBudget, minOver, maxOver, budget)
	}
	n := 0
	for _, o := range overruns {
		if o.StillRunning {
			continue // sampled while running: its end is counted
		}
		if o.Span != "tspan" {
			t.Errorf("overrun for %q: only tspan has a budget", o.Span)
			continue
		}
		n++
		if o.Source != "usdt" || o.DurationNs <= uint64(budget) || o.BudgetNs != uint64(budget) || o.PID != uint32(cmd.Process.Pid) {
			t.Errorf("overrun %+v: want source usdt, pid %d, over the %s budget", o, cmd.Process.Pid, budget)
		}
		if len(o.UserStack) < 2 {
			t.Errorf("overrun with %d user frames (%s), want the stack through thread_spans and main", len(o.UserStack), o.StackError)
		}
	}
	if n != overBudget {
		t.Errorf("%d overrun records, want %d", n, overBudget)
	}
}

func sorted(v []uint64) []uint64 {
	out := append([]uint64(nil), v...)
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out
}

func keys(m map[string]snapshot.Series) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
