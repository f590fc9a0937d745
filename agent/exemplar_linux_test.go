//go:build linux

package agent

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/spanwatch/spanwatch/collector"
	"github.com/spanwatch/spanwatch/config"
	"github.com/spanwatch/spanwatch/internal/promtest"
)

// TestExemplarInPrometheus runs the agent with a budget on a span that a
// child process ends over its budget with a trace id, lets a real
// Prometheus (native histograms and exemplar storage on) scrape the
// agent's /metrics, and finds the overrun's trace id, on the span's
// latency histogram, through /api/v1/query_exemplars: the path from the
// kernel's overrun record to a trace link in Prometheus.
func TestExemplarInPrometheus(t *testing.T) {
	requireRoot(t)
	if promtest.Binary() == "" {
		t.Skip("no prometheus: install Debian's prometheus package (.ci/install-deps.sh does) or set SPANWATCH_PROMETHEUS")
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	span := fmt.Sprintf("exemplar.test.%d", os.Getpid())
	const trace = "4bf92f3577b34da6a3ce929d0e0e4736"
	file := fmt.Sprintf("budgets:\n  - {span: %s, budget: 2ms}\n", span)
	cfg, err := config.Parse("rules.yaml", []byte(file),
		config.LoadOptions{Collector: config.CollectorSettings{Interval: 300 * time.Millisecond, Binaries: []string{exe}, ScanInterval: -1, Sources: []string{"marker"}}})
	if err != nil {
		t.Fatal(err)
	}
	var logs syncBuffer
	a, err := New(cfg, Options{Logger: testLogger(&logs), ListenAddr: "127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	ready := make(chan struct{})
	a.opts.OnReady = func(*collector.Collector) { close(ready) }
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	}()
	select {
	case <-ready:
	case err := <-done:
		t.Fatalf("agent stopped before it was ready: %v\n%s", err, logs.String())
	}
	prom := promtest.Start(t, promtest.Config{Targets: map[string]string{"agent": a.Addr().String()}, NativeHistograms: true, Exemplars: true})
	start := time.Now()
	cmd := emitter(t, 5, span, 0)
	cmd.Env = append(cmd.Env, "SPANWATCH_TEST_TRACE="+trace, "SPANWATCH_TEST_SLOW=10ms")
	if err := cmd.Run(); err != nil {
		t.Fatalf("emitter: %v\n%s", err, logs.String())
	}
	q := fmt.Sprintf("spanwatch_span_duration_seconds{span=%q}", span)
	var got []promtest.Exemplar
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(250 * time.Millisecond) {
		got = prom.Exemplars(q, start.Add(-time.Minute), time.Now().Add(time.Minute))
		// Snapshots may have taken the five overruns over several
		// scrapes: wait for the fifth.
		if (len(got) > 0 && got[len(got)-1].Labels["span_id"] == "0000000000000005") || time.Now().After(deadline) {
			break
		}
	}
	if len(got) == 0 {
		t.Fatalf("no exemplar of %s in Prometheus after 30s\n%s", q, logs.String())
	}
	// The newest reaches Prometheus last: the fifth, span id 5.
	last := got[len(got)-1]
	if last.Labels["trace_id"] != trace || last.Labels["span_id"] != "0000000000000005" || last.Value < 0.010 || last.Value > 5 {
		t.Errorf("newest exemplar %+v, want trace %s, span id 0000000000000005, a value of 10ms or more", last, trace)
	}
	if last.Time.Before(start.Add(-time.Second)) || last.Time.After(time.Now()) {
		t.Errorf("exemplar time %s, want during the test (from %s)", last.Time, start)
	}
	t.Logf("%d exemplars of %s; newest %v %.4fs at %s on %v", len(got), span, last.Labels, last.Value, last.Time.Format(time.RFC3339Nano), last.Series)
}
