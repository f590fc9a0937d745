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
	"github.com/spanwatch/spanwatch/internal/profile"
	"github.com/spanwatch/spanwatch/policy"
	"github.com/spanwatch/spanwatch/snapshot"
)

// TestUnderSpanwatch runs the example under a real collector with the
// budgets of rules.yaml: spanwatch counts every request; the slow charge,
// its checkout and the slow reports are over budget; the charge's overrun
// says its time went on the CPU in chargeCard, a slow report's that it
// went waiting in time.Sleep in fetchReportData; and the export that never
// ends is reported while it runs, waiting for its lock in writeExport.
func TestUnderSpanwatch(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root (CAP_BPF, CAP_PERFMON) to load BPF")
	}
	bin := buildExample(t)
	c, err := collector.New(context.Background(), collector.Config{
		Sources:        collector.Sources{Marker: true},
		ScanInterval:   -1,
		MarkerBinaries: []string{bin},
		// Scans every 20ms, not 100ms: the slow spans (300ms against
		// 100ms) are sampled even when the machine is slow.
		Inflight: collector.InflightConfig{Interval: 20 * time.Millisecond},
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
	get := func(path string) {
		resp, err := http.Get(url + path)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { // never answers
		req, _ := http.NewRequestWithContext(ctx, "GET", url+"/export", nil)
		if resp, err := http.DefaultClient.Do(req); err == nil {
			resp.Body.Close()
		}
	}()
	start := time.Now()
	for i := 0; i < 50; i++ {
		get("/checkout")
		get("/search")
		if i < 20 {
			get("/report")
		}
	}
	got := map[string]*snapshot.Series{}
	var ended, running []snapshot.Overrun
	merge := func() {
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
		for _, o := range s.Overruns {
			if o.StillRunning {
				running = append(running, o)
			} else {
				ended = append(ended, o)
			}
		}
	}
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) && (got["checkout"] == nil || got["search"] == nil || got["report.build"] == nil ||
		got["checkout"].Count < 50 || got["search"].Count < 50 || got["report.build"].Count < 20 || len(ended) < 4 ||
		!slices.ContainsFunc(running, func(o snapshot.Overrun) bool { return o.Span == "export" }) || time.Since(start) < 1500*time.Millisecond) {
		time.Sleep(100 * time.Millisecond)
		merge()
	}
	// One more window, for an overrun record still in the ring buffer
	// when its span's over-budget count was read.
	time.Sleep(300 * time.Millisecond)
	merge()
	// The slow requests by design: one checkout (its payment.charge spins
	// 300 ms) and two reports (300 ms asleep). A machine that stalls a
	// normal request past its budget (a 1-3 ms sleep taking 100 ms, seen
	// at load 7 on 2 CPUs) adds an over-budget span of that name: the
	// counter and the overruns must still agree, and the designed ones
	// must all be there.
	byDesign := map[string]uint64{"checkout": 1, "payment.charge": 1, "report.build": 2}
	endedBy := map[string]uint64{}
	for _, ov := range ended {
		endedBy[ov.Span]++
	}
	for span, want := range map[string][2]uint64{"checkout": {50, 0}, "payment.charge": {50, 0}, "search": {50, 2}, "report.build": {20, 0}} {
		g := got[span]
		if g == nil {
			t.Fatalf("no %s series", span)
		}
		if g.Count != want[0] || g.Errors != want[1] {
			t.Errorf("%s: count %d errors %d, want %d and %d", span, g.Count, g.Errors, want[0], want[1])
		}
		if g.OverBudget < byDesign[span] || g.OverBudget != endedBy[span] {
			t.Errorf("%s: over budget %d, ended overruns %d, want equal and at least %d", span, g.OverBudget, endedBy[span], byDesign[span])
		}
	}
	if g := got["export"]; g != nil && g.Count != 0 {
		t.Errorf("export counted %d times: it never ends", g.Count)
	}
	if len(ended) < 4 {
		t.Fatalf("%d overruns of ended spans, want at least 4 (checkout, payment.charge, 2 report.build)", len(ended))
	}
	for _, ov := range ended {
		if ov.DurationNs < uint64(300*time.Millisecond) {
			// A normal request the machine stalled past its budget.
			t.Logf("%s overrun of %v: not one of the slow paths", ov.Span, time.Duration(ov.DurationNs))
			continue
		}
		hot := profile.Hottest(ov.Samples, 1)
		t.Logf("%s: %v, %d sample stacks; hottest: %s", ov.Span, time.Duration(ov.DurationNs), len(ov.Samples), profile.FormatHottest(hot, ov.DurationNs))
		switch ov.Span {
		case "payment.charge":
			// A 300 ms busy loop past a 100 ms budget: samples on the
			// CPU, in chargeCard (the loop is inlined there). How many
			// depends on how much CPU the loop gets on this machine.
			if len(hot) == 0 || hot[0].Frame.Function != "main.chargeCard" || hot[0].OffCPUNs != 0 || hot[0].WeightNs == 0 {
				t.Errorf("payment.charge: hottest %+v, want main.chargeCard on the CPU", hot)
			}
		case "report.build":
			// 300 ms in time.Sleep: off the CPU, at the sleep, sampled
			// from about 100ms (the budget) on, as soon as a scan runs
			// (later on a loaded machine).
			if len(hot) == 0 || hot[0].Frame.Function != "main.fetchReportData" || hot[0].OffCPUNs == 0 || hot[0].OffCPUNs != hot[0].WeightNs {
				t.Errorf("report.build: hottest %+v, want main.fetchReportData, all off the CPU", hot)
			}
			if !slices.ContainsFunc(ov.Samples, func(s snapshot.Sample) bool { return s.OffCPU && hasFunc(s.UserStack, "time.Sleep") }) {
				t.Errorf("report.build: no off-CPU sample in time.Sleep")
			}
		}
	}
	var export *snapshot.Overrun
	for i := range running {
		if running[i].Span == "export" {
			export = &running[i]
		}
	}
	if export == nil {
		t.Fatalf("the export that never ends was not reported while running (still running: %d others)", len(running))
	}
	if !hasFunc(export.UserStack, "main.writeExport") || !hasFunc(export.UserStack, "sync.(*Mutex).Lock") || export.DurationNs < uint64(time.Second) {
		t.Errorf("export reported after %v at %v, want past 1s in sync.(*Mutex).Lock called by main.writeExport", time.Duration(export.DurationNs), funcs(export.UserStack))
	}
}

func funcs(frames []snapshot.Frame) []string {
	var out []string
	for _, f := range frames {
		out = append(out, f.Function)
	}
	return out
}

func hasFunc(frames []snapshot.Frame, fn string) bool {
	return slices.Contains(funcs(frames), fn)
}
