//go:build linux

package main

import (
	"context"
	"io"
	"net/http"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/spanwatch/spanwatch/collector"
	"github.com/spanwatch/spanwatch/policy"
	"github.com/spanwatch/spanwatch/snapshot"
)

// TestUnderSpanwatch runs the example under a real collector with the
// budgets of rules.yaml: spanwatch counts every request, the slow charge
// and its checkout are over budget, and the charge's overrun stack names
// chargeCard.
func TestUnderSpanwatch(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root (CAP_BPF, CAP_PERFMON) to load BPF")
	}
	bin := buildExample(t)
	c, err := collector.New(context.Background(), collector.Config{
		Sources:        collector.Sources{Marker: true},
		ScanInterval:   -1,
		MarkerBinaries: []string{bin},
	})
	if err != nil {
		t.Fatalf("collector: %v", err)
	}
	defer c.Close()
	cfg, err := policy.LoadFile("rules.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var budgets []collector.BudgetRule
	for _, b := range cfg.Budgets {
		budgets = append(budgets, collector.BudgetRule{Span: b.Span.String(), Budget: b.Budget})
	}
	if err := c.SetBudgets(budgets); err != nil {
		t.Fatal(err)
	}
	// The marker path, whatever this kernel offers: user_events is covered
	// by the VM tests.
	url := startExample(t, bin, "SPANWATCH_EMIT=marker")
	if _, err := c.Snapshot(); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 50; i++ {
		for _, path := range []string{"/checkout", "/search"} {
			resp, err := http.Get(url + path)
			if err != nil {
				t.Fatal(err)
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
	}
	got := map[string]*snapshot.Series{}
	var overruns []snapshot.Overrun
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) && (got["checkout"] == nil || got["search"] == nil || got["checkout"].Count < 50 || got["search"].Count < 50 || len(overruns) < 2) {
		time.Sleep(100 * time.Millisecond)
		s, err := c.Snapshot()
		if err != nil {
			t.Fatal(err)
		}
		for _, sr := range s.Series {
			if got[sr.Span] == nil {
				got[sr.Span] = &snapshot.Series{Span: sr.Span}
			}
			g := got[sr.Span]
			g.Count += sr.Count
			g.Errors += sr.Errors
			g.OverBudget += sr.OverBudget
		}
		overruns = append(overruns, s.Overruns...)
	}
	for span, want := range map[string][3]uint64{"checkout": {50, 0, 1}, "payment.charge": {50, 0, 1}, "search": {50, 2, 0}} {
		g := got[span]
		if g == nil {
			t.Fatalf("no %s series", span)
		}
		if g.Count != want[0] || g.Errors != want[1] || g.OverBudget != want[2] {
			t.Errorf("%s: count %d errors %d over budget %d, want %v", span, g.Count, g.Errors, g.OverBudget, want)
		}
	}
	if len(overruns) != 2 {
		t.Fatalf("%d overruns, want 2 (checkout and payment.charge)", len(overruns))
	}
	for _, ov := range overruns {
		var funcs []string
		for _, f := range ov.UserStack {
			funcs = append(funcs, f.Function)
		}
		if ov.DurationNs < uint64(300*time.Millisecond) {
			t.Errorf("%s overrun lasted %v, want at least 300ms", ov.Span, time.Duration(ov.DurationNs))
		}
		if ov.Span == "payment.charge" && !slices.Contains(funcs, "main.chargeCard") {
			t.Errorf("payment.charge overrun stack %v does not name main.chargeCard", funcs)
		}
	}
}
