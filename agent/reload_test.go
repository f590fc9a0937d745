//go:build linux

package agent

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
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

// reloadRig is an agent running on a configuration file the test edits,
// over spans this test process emits.
type reloadRig struct {
	t    *testing.T
	path string
	a    *Agent
	logs syncBuffer
	base string // the listener's URL

	mu      sync.Mutex
	firing  map[string]bool // by alert name
	windows []time.Duration // of the snapshots, in order
}

// config writes the configuration: one rule per name, firing while spans
// of reload.test arrive, and extra collector: lines.
func (r *reloadRig) config(rules []string, collectorLines ...string) {
	r.t.Helper()
	var b strings.Builder
	b.WriteString("rules:\n")
	for _, n := range rules {
		fmt.Fprintf(&b, "  - {name: %s, span: reload.test, when: count > 0}\n", n)
	}
	if len(collectorLines) > 0 {
		b.WriteString("collector:\n")
		for _, l := range collectorLines {
			b.WriteString("  " + l + "\n")
		}
	}
	r.write(b.String())
}

// write replaces the file the way editors do: a new file renamed over the
// old one.
func (r *reloadRig) write(text string) {
	r.t.Helper()
	tmp := r.path + ".tmp"
	if err := os.WriteFile(tmp, []byte(text), 0o644); err != nil {
		r.t.Fatal(err)
	}
	if err := os.Rename(tmp, r.path); err != nil {
		r.t.Fatal(err)
	}
}

func (r *reloadRig) isFiring(name string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.firing[name]
}

// waitFor polls cond until it holds or the deadline passes, and returns
// how long it took.
func (r *reloadRig) waitFor(what string, within time.Duration, cond func() bool) time.Duration {
	r.t.Helper()
	start := time.Now()
	for !cond() {
		if time.Since(start) > within {
			r.t.Fatalf("not within %s: %s\nlog:\n%s", within, what, r.logs.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	return time.Since(start)
}

func (r *reloadRig) lastWindows(n int) []time.Duration {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]time.Duration(nil), r.windows[max(0, len(r.windows)-n):]...)
}

func (r *reloadRig) httpGet(path string) string {
	r.t.Helper()
	resp, err := http.Get(r.base + path)
	if err != nil {
		r.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

// TestReload runs the agent on a file and edits it while it runs. Each
// step asserts what the agent does, end to end: new rules fire and
// removed ones resolve; a broken file keeps the running rules and is
// counted; an edit reverted within 4 s is seen both ways; changes are
// picked up within about the 1 s poll while the snapshot interval is an
// hour; collector.interval applies live; a setting that needs a restart
// waits for it, loudly, while the rest of the same edit applies.
func TestReload(t *testing.T) {
	requireRoot(t)
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	r := &reloadRig{t: t, path: filepath.Join(t.TempDir(), "spanwatch.yaml"), firing: map[string]bool{}}
	// An hour: whatever reloads within the test is the poll's doing.
	r.config([]string{"A"}, "interval: 1h")
	cfg, err := config.Load(r.path, config.LoadOptions{Collector: config.CollectorSettings{Interval: config.DefaultInterval, Binaries: []string{exe}, ScanInterval: -1, Sources: []string{"marker"}}})
	if err != nil {
		t.Fatal(err)
	}
	ready := make(chan struct{})
	r.a, err = New(cfg, Options{
		Logger:     testLogger(&r.logs),
		ListenAddr: "127.0.0.1:0",
		OnReady:    func(*collector.Collector) { close(ready) },
		OnSnapshot: func(s *snapshot.Snapshot) {
			r.mu.Lock()
			r.windows = append(r.windows, s.Window())
			r.mu.Unlock()
		},
		OnAlerts: func(as []*alert.Alert) {
			r.mu.Lock()
			for _, a := range as {
				r.firing[a.Name()] = a.State == alert.StateFiring
			}
			r.mu.Unlock()
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	r.base = "http://" + r.a.Addr().String()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.a.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	}()
	<-ready
	// The spans: this process, uprobed by the agent, until the test ends.
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			sp := emit.Start("reload.test")
			time.Sleep(time.Millisecond)
			sp.End(nil)
		}
	}()
	defer func() { close(stop); wg.Wait() }()

	// 1. The poll sees an edit within about a second although the next
	// snapshot is an hour away; the new interval applies at once.
	r.config([]string{"B"}, "interval: 300ms")
	took := r.waitFor("rule B loaded", 3*time.Second, func() bool { return r.a.Config().Rules.Rules[0].Name == "B" })
	t.Logf("edit seen after %s with a 1h snapshot interval", took.Round(time.Millisecond))
	r.waitFor("B fires", 3*time.Second, func() bool { return r.isFiring("B") })
	if !strings.Contains(r.logs.String(), "msg=interval_changed from=1h0m0s to=300ms") {
		t.Errorf("interval change not logged:\n%s", r.logs.String())
	}
	r.waitFor("snapshots every 300ms", 3*time.Second, func() bool {
		w := r.lastWindows(2)
		return len(w) == 2 && w[0] < 600*time.Millisecond && w[1] < 600*time.Millisecond
	})
	if r.isFiring("A") {
		t.Error("A kept firing after the reload removed it")
	}

	// 2. A broken file keeps what runs, and is counted once.
	r.write("rules:\n  - {name: C, span: reload.test, when: count >> 0}\ncollector:\n  interval: 300ms\n")
	r.waitFor("the failure counted", 3*time.Second, func() bool { return r.a.ReloadStats().Failures == 1 })
	if err := r.a.ReloadStats().LastError; err == nil || !strings.Contains(err.Error(), "spanwatch.yaml:2:") {
		t.Errorf("last error %v, want one at spanwatch.yaml:2", err)
	}
	time.Sleep(1500 * time.Millisecond) // polls and cycles go by
	if r.a.ReloadStats().Failures != 1 || r.a.Config().Rules.Rules[0].Name != "B" || !r.isFiring("B") || r.isFiring("C") {
		t.Errorf("after a broken file: stats %+v, rule %s, B firing %v", r.a.ReloadStats(), r.a.Config().Rules.Rules[0].Name, r.isFiring("B"))
	}
	if m := r.httpGet("/metrics"); !strings.Contains(m, "spanwatch_rule_reload_failures_total 1") {
		t.Errorf("/metrics lacks the failure:\n%s", grepLines(m, "reload"))
	}

	// 3. An edit reverted within 4 s is seen both ways.
	start := time.Now()
	r.config([]string{"D"}, "interval: 300ms")
	r.waitFor("D fires", 3*time.Second, func() bool { return r.isFiring("D") })
	r.config([]string{"B"}, "interval: 300ms")
	r.waitFor("B fires again", 3*time.Second, func() bool { return r.isFiring("B") && !r.isFiring("D") })
	t.Logf("edit and revert both applied within %s", time.Since(start).Round(time.Millisecond))

	// 4. A setting that only a restart applies waits for it, logged and
	// reported; the rest of the same edit applies.
	reloads := r.a.ReloadStats().Reloads
	r.config([]string{"B", "E"}, "interval: 300ms", "max_series: 2048", "force_kprobe: true")
	r.waitFor("E fires", 3*time.Second, func() bool { return r.isFiring("E") })
	pending := r.a.PendingRestart()
	if len(pending) != 2 || pending[0].Key != "collector.max_series" || pending[1].Key != "collector.force_kprobe" {
		t.Errorf("pending restart: %v", pending)
	}
	if r.a.ReloadStats().Reloads != reloads+1 {
		t.Errorf("reloads %d, want %d", r.a.ReloadStats().Reloads, reloads+1)
	}
	if !strings.Contains(r.logs.String(), "msg=reload_needs_restart") || !strings.Contains(r.logs.String(), "setting=collector.max_series") {
		t.Errorf("restart not asked for in the log:\n%s", r.logs.String())
	}
	if st := r.httpGet("/api/status"); !strings.Contains(st, `"key": "collector.max_series"`) {
		t.Errorf("/api/status: %s", st)
	}
	if m := r.httpGet("/metrics"); !strings.Contains(m, "spanwatch_config_restart_pending 2") {
		t.Errorf("/metrics: %s", grepLines(m, "restart"))
	}
	// Back to what runs: nothing waits any more.
	r.config([]string{"B"}, "interval: 300ms")
	r.waitFor("nothing pending", 3*time.Second, func() bool { return len(r.a.PendingRestart()) == 0 })
}

func grepLines(text, word string) string {
	var out []string
	for _, l := range strings.Split(text, "\n") {
		if strings.Contains(l, word) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
