//go:build linux

package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/spanwatch/spanwatch/emit"
	"github.com/spanwatch/spanwatch/snapshot"
)

// TestMain makes the test binary a span emitter when SPANWATCH_TEST_EMIT
// is set: once a collector uprobed its marker, it ends that many spans
// named $SPANWATCH_TEST_SPAN and exits.
func TestMain(m *testing.M) {
	if v := os.Getenv("SPANWATCH_TEST_SCHEDULE"); v != "" {
		os.Exit(emitSchedule(v))
	}
	if v := os.Getenv("SPANWATCH_TEST_EMIT"); v != "" {
		n, _ := strconv.Atoi(v)
		for deadline := time.Now().Add(30 * time.Second); !emit.Enabled(); time.Sleep(time.Millisecond) {
			if time.Now().After(deadline) {
				fmt.Fprintln(os.Stderr, "no collector attached within 30s")
				os.Exit(3)
			}
		}
		for i := 0; i < n; i++ {
			emit.Start(os.Getenv("SPANWATCH_TEST_SPAN")).End(nil)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// lockedBuffer collects a child's stderr while the test reads it.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestRunSIGTERM runs the built binary as the agent with the default 10s
// interval, lets a child process emit N spans through the marker, and
// sends SIGTERM mid-interval: the agent exits 0 after logging its
// shutdown, and the output file's counts sum to N.
func TestRunSIGTERM(t *testing.T) {
	requireRoot(t)
	bin := buildSpanwatch(t)
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	cfg := filepath.Join(dir, "spanwatch.yaml")
	// The agent attaches to every process that links the span SDK, other
	// packages' tests too (agent's emit spans as well): a name of this
	// run's keeps their spans out of the count.
	span := fmt.Sprintf("shutdown.test.%d", os.Getpid())
	if err := os.WriteFile(cfg, []byte("rules:\n  - {name: Busy, span: "+span+", when: count > 0}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "out.jsonl")
	var stderr lockedBuffer
	agent := exec.Command(bin, "run", "--config", cfg, "--output", out, "--binary", self, "--source", "marker")
	agent.Stderr = &stderr
	if err := agent.Start(); err != nil {
		t.Fatal(err)
	}
	defer agent.Process.Kill()
	for deadline := time.Now().Add(time.Minute); !strings.Contains(stderr.String(), "msg=started"); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the agent did not start:\n%s", stderr.String())
		}
	}
	const n = 100000
	child := exec.Command(self)
	child.Env = append(os.Environ(), "SPANWATCH_TEST_EMIT="+strconv.Itoa(n), "SPANWATCH_TEST_SPAN="+span, "SPANWATCH_EMIT=marker")
	child.Stderr = os.Stderr
	if err := child.Run(); err != nil {
		t.Fatalf("emitter: %v\n%s", err, stderr.String())
	}
	sent := time.Now()
	if err := agent.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := agent.Wait(); err != nil {
		t.Fatalf("the agent exited with %v after SIGTERM:\n%s", err, stderr.String())
	}
	t.Logf("exited %s after SIGTERM", time.Since(sent).Round(time.Millisecond))
	for _, want := range []string{"msg=shutting_down", "msg=stopped"} {
		if !strings.Contains(stderr.String(), want) {
			t.Errorf("log lacks %s:\n%s", want, stderr.String())
		}
	}
	f, err := os.Open(out)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var counted uint64
	lines := 0
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 64<<20)
	for sc.Scan() {
		var s snapshot.Snapshot
		if err := json.Unmarshal(sc.Bytes(), &s); err != nil {
			t.Fatal(err)
		}
		lines++
		for _, sr := range s.Series {
			if sr.Span == span {
				counted += sr.Count
			}
		}
	}
	if counted != n {
		t.Errorf("%d spans emitted before SIGTERM, %d counted over %d snapshots", n, counted, lines)
	}
	t.Logf("%d spans emitted before SIGTERM, %d counted over %d snapshots", n, counted, lines)
}

// TestDemoJSON checks that demo --json prints only JSON lines on stdout:
// snapshots, and alerts as {"alert": ...}; the human text goes to stderr.
func TestDemoJSON(t *testing.T) {
	requireRoot(t)
	bin := buildSpanwatch(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "demo", "--json", "--duration", "4s")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("demo: %v\n%s", err, stderr.String())
	}
	var snaps, alerts int
	for i, line := range strings.Split(strings.TrimRight(stdout.String(), "\n"), "\n") {
		var obj map[string]json.RawMessage
		if err := json.Unmarshal([]byte(line), &obj); err != nil {
			t.Fatalf("stdout line %d is not a JSON object: %v\n%q", i+1, err, line)
		}
		switch {
		case obj["series"] != nil && obj["version"] != nil:
			snaps++
		case obj["alert"] != nil:
			var a struct {
				Labels map[string]string `json:"labels"`
				State  string            `json:"state"`
			}
			if err := json.Unmarshal(obj["alert"], &a); err != nil || a.Labels["alertname"] == "" || a.State == "" {
				t.Errorf("alert line %d: %v %s", i+1, err, line)
			}
			alerts++
		default:
			t.Errorf("stdout line %d is neither a snapshot nor an alert: %s", i+1, line)
		}
	}
	if snaps < 2 || alerts == 0 {
		t.Errorf("%d snapshots and %d alerts on stdout", snaps, alerts)
	}
	for _, want := range []string{"spanwatch demo: workload emits through", "demo done:"} {
		if !strings.Contains(stderr.String(), want) {
			t.Errorf("stderr lacks %q:\n%s", want, stderr.String())
		}
	}
}
