//go:build linux

package agent

import (
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/spanwatch/spanwatch/config"
	"github.com/spanwatch/spanwatch/internal/memory"
	"github.com/spanwatch/spanwatch/snapshot"
)

// TestShedOnMetrics drives the agent's governor with measurements and
// checks /metrics: the budget and its source, what is shed and since
// when, level by level, and that given back it says so; and that the
// exporter's part of the shedding (stale exports) applies.
func TestShedOnMetrics(t *testing.T) {
	cfg, err := config.Parse("rules.yaml", []byte("rules: []\ncollector:\n  memory_budget: 256MiB\n"), config.LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	a, err := New(cfg, Options{ListenAddr: "127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	a.listener.serve()
	get := func() string {
		resp, err := http.Get("http://" + a.Addr().String() + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return string(b)
	}
	at := func(frac float64) memory.Usage { return memory.Usage{Go: uint64(frac * float64(a.plan.Budget.Bytes))} }
	t0 := time.Unix(2_000_000_000, 0)
	body := get()
	for _, want := range []string{
		`spanwatch_memory_budget_bytes{source="setting"} 2.68435456e+08`,
		`spanwatch_memory_shed{detail="stack_detail"} 0`,
		`spanwatch_memory_shed_level 0`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
	// Two series, then one: the other left the kernel.
	a.exporter.Observe(&snapshot.Snapshot{Time: t0, Series: []snapshot.Series{{Span: "a", Count: 1}, {Span: "b", Count: 1}}})
	a.gov.Observe(t0, at(0.90))
	a.exporter.Observe(&snapshot.Snapshot{Time: t0.Add(time.Second), Series: []snapshot.Series{{Span: "a", Count: 1}}})
	body = get()
	for _, want := range []string{
		`spanwatch_memory_shed{detail="stack_detail"} 1`,
		`spanwatch_memory_shed{detail="unused_range_history"} 1`,
		`spanwatch_memory_shed{detail="stale_exports"} 1`,
		`spanwatch_memory_shed{detail="range_history_depth"} 0`,
		`spanwatch_memory_shed_since_timestamp_seconds{detail="stale_exports"} 2e+09`,
		`spanwatch_memory_shed_level 3`,
		`spanwatch_memory_usage_bytes{part="go"} `,
		`spanwatch_spans_total{span="a"} 2`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("shedding: /metrics lacks %q", want)
		}
	}
	if strings.Contains(body, `spanwatch_spans_total{span="b"}`) || strings.Contains(body, `detail="range_history_depth"} 2e+09`) {
		t.Error("shedding stale exports: b is still exported, or depth is said to be shed")
	}
	// Given back one level after Hold below it.
	a.gov.Observe(t0.Add(time.Minute), at(0.5))
	a.gov.Observe(t0.Add(time.Minute+memory.Hold), at(0.5))
	if body = get(); !strings.Contains(body, `spanwatch_memory_shed{detail="stale_exports"} 0`) || !strings.Contains(body, `spanwatch_memory_shed_level 2`) {
		t.Errorf("given back: /metrics says %q", grepLines(body, "spanwatch_memory_shed"))
	}
}
