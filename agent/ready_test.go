//go:build linux

package agent

import (
	"context"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/spanwatch/spanwatch/config"
	"github.com/spanwatch/spanwatch/snapshot"
)

// probe fetches a path and returns its status and body; an error status
// of -1 when the request failed.
func probe(base, path string) (int, string) {
	c := &http.Client{Timeout: 5 * time.Second}
	resp, err := c.Get(base + path)
	if err != nil {
		return -1, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// TestReadiness runs a real agent (BPF loaded) and asks /-/ready through
// its life: 503 "starting" until the first snapshot, 200 after it, 503
// "shutting down" during the final snapshot; /-/healthy answers 200 from
// the start.
func TestReadiness(t *testing.T) {
	requireRoot(t)
	cfg, err := config.Parse("rules.yaml", []byte("rules: []\n"),
		config.LoadOptions{Collector: config.CollectorSettings{Interval: 2 * time.Second, ScanInterval: -1, Sources: []string{"marker"}}})
	if err != nil {
		t.Fatal(err)
	}
	var logs syncBuffer
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var mu sync.Mutex
	var atStop []string // /-/ready's answers from the final snapshot's hook
	var a *Agent
	a, err = New(cfg, Options{Logger: testLogger(&logs), ListenAddr: "127.0.0.1:0", OnSnapshot: func(*snapshot.Snapshot) {
		if ctx.Err() == nil {
			return
		}
		code, body := probe("http://"+a.Addr().String(), "/-/ready")
		mu.Lock()
		atStop = append(atStop, strings.TrimSpace(body))
		mu.Unlock()
		if code != http.StatusServiceUnavailable {
			t.Errorf("/-/ready during the shutdown: %d %q, want 503", code, body)
		}
	}})
	if err != nil {
		t.Fatal(err)
	}
	base := "http://" + a.Addr().String()
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()

	var seen []string // distinct answers, in order
	deadline := time.Now().Add(30 * time.Second)
	for {
		if time.Now().After(deadline) {
			t.Fatalf("not ready within 30s; answers %q\n%s", seen, logs.String())
		}
		select {
		case err := <-done:
			t.Fatalf("Run returned %v\n%s", err, logs.String())
		default:
		}
		code, body := probe(base, "/-/ready")
		ans := strings.TrimSpace(body)
		if code == -1 {
			time.Sleep(10 * time.Millisecond)
			continue
		}
		if len(seen) == 0 || seen[len(seen)-1] != ans {
			seen = append(seen, ans)
		}
		if hc, hb := probe(base, "/-/healthy"); hc != http.StatusOK || hb != "ok\n" {
			t.Errorf("/-/healthy while /-/ready says %q: %d %q", ans, hc, hb)
		}
		switch {
		case code == http.StatusOK:
			if ans != "ready" {
				t.Errorf("/-/ready 200 with %q", ans)
			}
		case code == http.StatusServiceUnavailable && strings.HasPrefix(ans, "not ready: starting: "):
			time.Sleep(20 * time.Millisecond)
			continue
		default:
			t.Fatalf("/-/ready: %d %q", code, ans)
		}
		break
	}
	// Starting, then ready: the first answers said why it was not ready
	// yet (the first snapshot is 2s after the start).
	if len(seen) < 2 || !strings.Contains(seen[len(seen)-2], "waiting for the first snapshot") {
		t.Errorf("answers %q: want the wait for the first snapshot before ready", seen)
	}
	if a.last.get() == nil {
		t.Error("ready without a snapshot")
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run: %v", err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(atStop) != 1 || atStop[0] != "not ready: shutting down" {
		t.Errorf("/-/ready in the final snapshot: %q, want [\"not ready: shutting down\"]", atStop)
	}
	t.Logf("/-/ready answered %q, then %q while stopping", seen, atStop)
}
