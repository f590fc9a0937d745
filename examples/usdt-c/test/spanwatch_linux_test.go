//go:build linux && amd64

package usdtc

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"
	"time"

	usdtsource "github.com/spanwatch/spanwatch/source/usdt"

	"github.com/spanwatch/spanwatch/collector"
	"github.com/spanwatch/spanwatch/config"
	"github.com/spanwatch/spanwatch/snapshot"
)

// TestUnderSpanwatch attaches spanwatch.yaml's USDT sources and budgets to
// a real collector, runs 60 requests, and checks the spans: 20 /checkout
// (2 over budget, their stacks in handle_request), 40 /search (4 errors),
// 60 cache.lookup.
func TestUnderSpanwatch(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root (CAP_BPF, CAP_PERFMON, CAP_SYS_ADMIN for uprobes) to load BPF")
	}
	dir := t.TempDir()
	cfgPath := build(t, dir)
	cfg, err := config.Load(cfgPath, config.LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	srcs := cfg.Sources
	c, err := collector.New(context.Background(), collector.Config{Sources: collector.Sources{Marker: true}, ScanInterval: -1})
	if err != nil {
		t.Fatalf("collector: %v", err)
	}
	defer c.Close()
	tr, err := usdtsource.Attach(context.Background(), c.SourceCore(), srcs)
	if err != nil {
		t.Fatalf("attach usdt sources: %v", err)
	}
	defer tr.Close()
	var budgets []collector.BudgetRule
	for _, b := range cfg.Rules.Budgets {
		budgets = append(budgets, collector.BudgetRule{Span: b.Span.String(), Budget: b.Budget})
	}
	if err := c.SetBudgets(budgets); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Snapshot(); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(filepath.Join(dir, "server"), "-n", "60", "-i", "0").CombinedOutput(); err != nil {
		t.Fatalf("server: %v\n%s", err, out)
	}

	got := map[string]*snapshot.Series{}
	var overruns []snapshot.Overrun
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) && len(overruns) < 2 {
		time.Sleep(100 * time.Millisecond)
		s, err := c.Snapshot()
		if err != nil {
			t.Fatal(err)
		}
		for _, sr := range s.Series {
			if got[sr.Span] == nil {
				got[sr.Span] = &snapshot.Series{}
			}
			g := got[sr.Span]
			g.Count += sr.Count
			g.Errors += sr.Errors
			g.OverBudget += sr.OverBudget
		}
		overruns = append(overruns, s.Overruns...)
	}
	for span, want := range map[string][3]uint64{"/checkout": {20, 0, 2}, "/search": {40, 4, 0}, "cache.lookup": {60, 0, 0}} {
		g := got[span]
		if g == nil {
			t.Errorf("no %s series", span)
			continue
		}
		if g.Count != want[0] || g.Errors != want[1] || g.OverBudget != want[2] {
			t.Errorf("%s: count %d errors %d over budget %d, want %v", span, g.Count, g.Errors, g.OverBudget, want)
		}
	}
	if len(overruns) != 2 {
		t.Fatalf("%d overruns, want 2", len(overruns))
	}
	for _, ov := range overruns {
		var funcs []string
		for _, f := range ov.UserStack {
			funcs = append(funcs, f.Function)
		}
		if ov.Span != "/checkout" || ov.Source != "usdt" || ov.DurationNs < uint64(80*time.Millisecond) || !slices.Contains(funcs, "handle_request") {
			t.Errorf("overrun %s from %s lasting %v, stack %v; want /checkout from usdt, >= 80ms, in handle_request", ov.Span, ov.Source, time.Duration(ov.DurationNs), funcs)
		}
	}
}
