//go:build linux

package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/spanwatch/spanwatch/collector"
	"github.com/spanwatch/spanwatch/internal/profile"
	"github.com/spanwatch/spanwatch/policy"
	"github.com/spanwatch/spanwatch/snapshot"
)

// TestUnderSpanwatch runs the example under a real collector with the
// budgets of rules.yaml: spanwatch counts the OpenTelemetry spans, each
// overrun carries the trace id the service reported for that request, and
// the first frame its report shows is the service's own code (main.), not
// the span SDKs' or OpenTelemetry's: the hottest frame of the samples
// taken while the span ran, or the end stack without their frames.
func TestUnderSpanwatch(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root (CAP_BPF, CAP_PERFMON) to load BPF")
	}
	bin := buildExample(t)
	c, err := collector.New(context.Background(), collector.Config{
		Sources:        collector.Sources{Marker: true},
		ScanInterval:   -1,
		MarkerBinaries: []string{bin},
		// Scans every 20ms, not 100ms: the slow query (300ms against
		// 50ms) is sampled even when the machine is slow.
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
	url := startExample(t, bin, "SPANWATCH_EMIT=marker")
	// Glob budgets apply once the collector has seen the name: one
	// request, then a snapshot, before the measured ones.
	get := func(path string) (traceID string, took time.Duration) {
		start := time.Now()
		resp, err := http.Get(url + path)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.Header.Get("X-Trace-Id"), time.Since(start)
	}
	warmup, warmupTook := get("/orders/warmup")
	if _, err := c.Snapshot(); err != nil {
		t.Fatal(err)
	}
	// The spans of one request last no longer than the request as the
	// client sees it. A quick request (a 1-3ms query) that a loaded
	// machine stretched past a span's budget is over budget for
	// spanwatch too, rightly: such requests are listed per span, and only
	// they may add to the two slow ones.
	slow := map[string]bool{}
	stretched := map[string]map[string]bool{"GET /orders/{id}": {}, "db.query": {}}
	stretch := func(n int, id string, took time.Duration) {
		for span, m := range stretched {
			if budget, _ := cfg.BudgetFor(span); took > budget {
				m[id] = true
				t.Logf("request %d took %v, over the budget of %s (%v): it may be over budget there", n, took.Round(time.Millisecond), span, budget)
			}
		}
	}
	// The warmup's counts went with the first snapshot; an overrun of
	// its may come later.
	stretch(1, warmup, warmupTook)
	warmupExtra := map[string]uint64{}
	for span, m := range stretched {
		warmupExtra[span] = uint64(len(m))
	}
	for i := 1; i < 50; i++ { // requests 2..50: queries 25 and 50 are slow
		id, took := get(fmt.Sprintf("/orders/%d", i))
		if (i+1)%25 == 0 {
			slow[id] = true
			continue
		}
		stretch(i+1, id, took)
	}
	if len(slow) != 2 {
		t.Fatalf("%d slow requests, want 2", len(slow))
	}
	got := map[string]*snapshot.Series{}
	var overruns []snapshot.Overrun
	slowOverruns := func() (n int) {
		for _, o := range overruns {
			if slow[o.TraceID] {
				n++
			}
		}
		return n
	}
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) && slowOverruns() < 4 {
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
		for _, o := range s.Overruns {
			if !o.StillRunning { // reported while running: its end follows
				overruns = append(overruns, o)
			}
		}
	}
	// Requests 2..50: orders 10, 20, 30, 40, 50 fail, in both spans.
	for span, want := range map[string][3]uint64{"GET /orders/{id}": {49, 5, 2}, "db.query": {49, 5, 2}} {
		g := got[span]
		if g == nil {
			t.Fatalf("no %s series (have %v)", span, got)
		}
		extra := uint64(len(stretched[span])) - warmupExtra[span]
		if g.Count != want[0] || g.Errors != want[1] || g.OverBudget < want[2] || g.OverBudget > want[2]+extra {
			t.Errorf("%s: count %d errors %d over budget %d, want %v (over budget up to %d more: requests the load stretched past the budget)", span, g.Count, g.Errors, g.OverBudget, want, extra)
		}
	}
	if n := slowOverruns(); n != 4 {
		t.Fatalf("%d overruns of the slow requests, want 4 (%d overruns)", n, len(overruns))
	}
	for _, ov := range overruns {
		if !slow[ov.TraceID] {
			if !stretched[ov.Span][ov.TraceID] {
				t.Errorf("%s overrun has trace id %q, not one of the slow requests' %v nor of a request that took longer than the budget", ov.Span, ov.TraceID, slow)
			}
			continue // a quick query that waited for the CPU: its stacks show the wait
		}
		// What the report shows first: the hottest frame of the
		// samples, else the end stack's first frame once the SDK's and
		// OpenTelemetry's are trimmed (the record keeps them).
		end, trimmed := profile.TrimOwn(ov.UserStack)
		var first snapshot.Frame
		if hot := profile.Hottest(ov.Samples, 1); len(hot) > 0 {
			first = hot[0].Frame
		} else if len(end) > 0 {
			first = end[0]
		}
		t.Logf("%s: first frame shown %s (%d samples, %d own frames trimmed from the end stack of %d)", ov.Span, first, len(ov.Samples), trimmed, len(ov.UserStack))
		if !strings.HasPrefix(first.Function, "main.") {
			t.Errorf("%s overrun shows %s first, want the service's code (main.): end stack %v", ov.Span, first, funcNames(ov.UserStack))
		}
		if ov.Span == "db.query" && (len(end) == 0 || !strings.HasPrefix(end[0].Function, "main.loadOrder") || trimmed == 0) {
			t.Errorf("db.query end stack without own frames starts %v, want main.loadOrder (%d trimmed)", funcNames(end), trimmed)
		}
	}
}

func funcNames(frames []snapshot.Frame) []string {
	var out []string
	for _, f := range frames {
		out = append(out, f.Function)
	}
	return out
}
