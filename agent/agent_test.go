//go:build linux

package agent

import (
	"bufio"
	"context"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/spanwatch/spanwatch/alert"
	"github.com/spanwatch/spanwatch/collector"
	"github.com/spanwatch/spanwatch/config"
	"github.com/spanwatch/spanwatch/emit"
	"github.com/spanwatch/spanwatch/snapshot"
)

// TestMain makes the test binary an emitter when SPANWATCH_TEST_EMIT is
// set: it waits until a collector has uprobed its marker, ends that many
// spans named $SPANWATCH_TEST_SPAN, and exits. The agent's tests run it as
// a child, so its spans come from another process, as in production.
// With SPANWATCH_TEST_GET it is an HTTP client (clientMain), which the
// listener's tests run as nobody.
func TestMain(m *testing.M) {
	if n := os.Getenv("SPANWATCH_TEST_EMIT"); n != "" {
		os.Exit(emitSpans(n, os.Getenv("SPANWATCH_TEST_SPAN")))
	}
	if os.Getenv("SPANWATCH_TEST_GET") != "" {
		os.Exit(clientMain())
	}
	code := m.Run()
	removeNobodyDir()
	os.Exit(code)
}

// shutdownSpan is the span the shutdown tests emit, named for this run: an
// agent attaches to every process that links the span SDK, so another
// package's tests running at the same time (cmd/spanwatch's emit spans too)
// must not add to the count.
var shutdownSpan = fmt.Sprintf("shutdown.test.%d", os.Getpid())

func emitSpans(count, name string) int {
	n, err := strconv.Atoi(count)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	for deadline := time.Now().Add(30 * time.Second); !emit.Enabled(); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			fmt.Fprintln(os.Stderr, "no collector attached within 30s (mode "+emit.Mode()+")")
			return 3
		}
	}
	// With SPANWATCH_TEST_SPREAD, the spans are spread over that long, in
	// ten batches, so that they straddle snapshots.
	spread, _ := time.ParseDuration(os.Getenv("SPANWATCH_TEST_SPREAD"))
	// With SPANWATCH_TEST_TRACE (32 hex digits), each span lasts
	// SPANWATCH_TEST_SLOW and ends with that trace id and span id i+1.
	if tr := os.Getenv("SPANWATCH_TEST_TRACE"); tr != "" {
		var trace [16]byte
		if _, err := hex.Decode(trace[:], []byte(tr)); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 2
		}
		slow, _ := time.ParseDuration(os.Getenv("SPANWATCH_TEST_SLOW"))
		for i := 0; i < n; i++ {
			sp := emit.Start(name)
			time.Sleep(slow)
			var id [8]byte
			binary.BigEndian.PutUint64(id[:], uint64(i+1))
			sp.EndWithIDs(nil, trace, id)
		}
		return 0
	}
	for i := 0; i < n; i++ {
		if spread > 0 && i%(max(1, n/10)) == 0 {
			time.Sleep(spread / 10)
		}
		sp := emit.Start(name)
		var err error
		if i%10 == 0 {
			err = errors.New("every tenth span fails")
		}
		sp.End(err)
	}
	return 0
}

func requireRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root (CAP_BPF, CAP_PERFMON) to load BPF")
	}
}

// emitter runs this test binary as a child that emits n spans over
// spread.
func emitter(t *testing.T, n int, span string, spread time.Duration) *exec.Cmd {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(exe)
	cmd.Env = append(os.Environ(), "SPANWATCH_TEST_EMIT="+strconv.Itoa(n), "SPANWATCH_TEST_SPAN="+span, "SPANWATCH_TEST_SPREAD="+spread.String(), "SPANWATCH_EMIT=marker")
	cmd.Stderr = os.Stderr
	return cmd
}

// countSpans sums the counts of span over the JSON lines of an output file.
func countSpans(t *testing.T, path, span string) (total uint64, lines int) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 64<<20)
	for sc.Scan() {
		var s snapshot.Snapshot
		if err := json.Unmarshal(sc.Bytes(), &s); err != nil {
			t.Fatalf("output line %d: %v", lines+1, err)
		}
		lines++
		for _, sr := range s.Series {
			if sr.Span == span {
				total += sr.Count
			}
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return total, lines
}

// TestGracefulShutdown emits N spans from a child process through the
// marker source, then ends the agent's context mid-interval: the output
// file's counts sum to N, and the shutdown is logged. With an interval
// longer than the test, all of them are in the final snapshot; with a
// short one, the spans straddle several snapshots and the final one has
// the rest.
func TestGracefulShutdown(t *testing.T) {
	requireRoot(t)
	for _, tc := range []struct {
		name     string
		interval time.Duration
		spread   time.Duration
		lines    func(int) bool
	}{
		{"all in the final snapshot", time.Hour, 0, func(n int) bool { return n == 1 }},
		{"across snapshots", 300 * time.Millisecond, 2 * time.Second, func(n int) bool { return n >= 3 }},
	} {
		t.Run(tc.name, func(t *testing.T) { testShutdown(t, tc.interval, tc.spread, tc.lines) })
	}
}

func testShutdown(t *testing.T, interval, spread time.Duration, linesOK func(int) bool) {
	const n = 20000
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	outPath := filepath.Join(dir, "out.jsonl")
	out, err := os.Create(outPath)
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()
	cfg, err := config.Parse("rules.yaml", []byte("rules:\n  - {name: Failing, span: "+shutdownSpan+", when: error_ratio > 5%}\n"),
		config.LoadOptions{Collector: config.CollectorSettings{Interval: interval, Binaries: []string{exe}, ScanInterval: -1, Sources: []string{"marker"}}})
	if err != nil {
		t.Fatal(err)
	}
	var logs syncBuffer
	var mu sync.Mutex
	var changed []*alert.Alert
	a, err := New(cfg, Options{Logger: testLogger(&logs), Output: out, OnAlerts: func(as []*alert.Alert) {
		mu.Lock()
		changed = append(changed, as...)
		mu.Unlock()
	}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	ready := make(chan struct{})
	a.opts.OnReady = func(*collector.Collector) { close(ready) }
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	select {
	case <-ready:
	case err := <-done:
		t.Fatalf("agent stopped before it was ready: %v\n%s", err, logs.String())
	}
	if err := emitter(t, n, shutdownSpan, spread).Run(); err != nil {
		cancel()
		t.Fatalf("emitter: %v\n%s", err, logs.String())
	}
	start := time.Now()
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run: %v", err)
	}
	took := time.Since(start)
	got, lines := countSpans(t, outPath, shutdownSpan)
	if got != n || !linesOK(lines) {
		t.Errorf("emitted %d spans, the output counts %d over %d snapshots\n%s", n, got, lines, logs.String())
	}
	for _, want := range []string{"msg=shutting_down", "msg=stopped"} {
		if !strings.Contains(logs.String(), want) {
			t.Errorf("log lacks %q:\n%s", want, logs.String())
		}
	}
	mu.Lock()
	defer mu.Unlock()
	// The rule held over the spans: its alert fired (in the final
	// evaluation when that is the only one).
	if len(changed) == 0 || changed[0].Name() != "Failing" || changed[0].State != alert.StateFiring {
		t.Errorf("alerts changed: %+v, want Failing firing first", changed)
	}
	t.Logf("%d spans emitted, %d counted over %d snapshots; shutdown took %s", n, got, lines, took)
}
