//go:build linux

package agent

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/spanwatch/spanwatch/collector"
	"github.com/spanwatch/spanwatch/config"
	"github.com/spanwatch/spanwatch/emit"
	"github.com/spanwatch/spanwatch/notify"
	"github.com/spanwatch/spanwatch/snapshot"
)

// hookLog is a webhook receiver that records each alert's statuses in
// order, by alert name.
type hookLog struct {
	mu     sync.Mutex
	status map[string][]string
}

func (h *hookLog) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var m notify.Message
	body, _ := io.ReadAll(r.Body)
	if err := json.Unmarshal(body, &m); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	h.mu.Lock()
	for _, a := range m.Alerts {
		h.status[a.Labels["alertname"]] = append(h.status[a.Labels["alertname"]], a.Status)
	}
	h.mu.Unlock()
}

func (h *hookLog) last(name string) string {
	h.mu.Lock()
	defer h.mu.Unlock()
	if s := h.status[name]; len(s) > 0 {
		return s[len(s)-1]
	}
	return ""
}

// TestReloadSequences edits a running agent's file the ways that used to
// crash it or apply half of a file: the webhooks: section removed and
// SIGHUP twice (a nil-pointer panic), the file truncated and restored, a
// 0-byte file (every alert vanished without a resolved notification),
// and budgets the kernel cannot hold (5000 exact names, 65 globs, a glob
// longer than 64 bytes, a 9000h budget: logged, not counted, and a mix
// of old and new budgets left in the kernel). Each refused reload is
// counted in /api/status and /metrics and leaves the kernel's budgets
// exactly as they were (read back from the kernel's maps); an applied one
// puts exactly the new ones in force.
func TestReloadSequences(t *testing.T) {
	requireRoot(t)
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	hooks := &hookLog{status: map[string][]string{}}
	srv := httptest.NewServer(hooks)
	defer srv.Close()
	dir := t.TempDir()
	path := filepath.Join(dir, "spanwatch.yaml")
	span := fmt.Sprintf("reloadtx.%d", os.Getpid())
	webhooks := fmt.Sprintf("webhooks:\n  - {name: ops, url: %q, group_wait: 0s, group_interval: 100ms, min_backoff: 50ms}\nrouting:\n  outbox: {path: %q}\n",
		srv.URL, filepath.Join(dir, "outbox.db"))
	budgets := func(prefix string, exact, globs int) (string, []collector.BudgetRule) {
		var b strings.Builder
		var rules []collector.BudgetRule
		b.WriteString("budgets:\n")
		for i := 0; i < exact; i++ {
			fmt.Fprintf(&b, "  - {span: %s.%d, budget: 1s}\n", prefix, i)
			rules = append(rules, collector.BudgetRule{Span: fmt.Sprintf("%s.%d", prefix, i), Budget: time.Second})
		}
		for i := 0; i < globs; i++ {
			fmt.Fprintf(&b, "  - {span: \"%s.g%d.*\", budget: 2s}\n", prefix, i)
			rules = append(rules, collector.BudgetRule{Span: fmt.Sprintf("%s.g%d.*", prefix, i), Budget: 2 * time.Second})
		}
		return b.String(), rules
	}
	rules := fmt.Sprintf("rules:\n  - {name: Hot, span: %s, when: count > 0, over: 0s}\ncollector:\n  interval: 200ms\n", span)
	aBudgets, aRules := budgets("a", 100, 3)
	full := rules + aBudgets + webhooks
	write := func(text string) {
		t.Helper()
		tmp := path + ".tmp"
		if err := os.WriteFile(tmp, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, path); err != nil {
			t.Fatal(err)
		}
	}
	write(full)
	cfg, err := config.Load(path, config.LoadOptions{Collector: config.CollectorSettings{Interval: config.DefaultInterval, Binaries: []string{exe}, ScanInterval: -1, Sources: []string{"marker"}}})
	if err != nil {
		t.Fatal(err)
	}
	var logs syncBuffer
	var col *collector.Collector
	ready := make(chan struct{})
	a, err := New(cfg, Options{Logger: testLogger(&logs), ListenAddr: "127.0.0.1:0", ReloadInterval: -1,
		OnReady: func(c *collector.Collector) { col = c; close(ready) }})
	if err != nil {
		t.Fatal(err)
	}
	base := "http://" + a.Addr().String()
	get := func(p string) string {
		t.Helper()
		resp, err := http.Get(base + p)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return string(b)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	}()
	<-ready
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
			sp := emit.Start(span)
			time.Sleep(time.Millisecond)
			sp.End(nil)
		}
	}()
	defer func() { close(stop); wg.Wait() }()
	waitFor := func(what string, cond func() bool) {
		t.Helper()
		for deadline := time.Now().Add(10 * time.Second); !cond(); time.Sleep(20 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("not within 10s: %s\nlog:\n%s", what, logs.String())
			}
		}
	}
	hup := func() {
		t.Helper()
		before := a.ReloadStats()
		if err := syscall.Kill(os.Getpid(), syscall.SIGHUP); err != nil {
			t.Fatal(err)
		}
		waitFor("the SIGHUP's reload", func() bool {
			st := a.ReloadStats()
			return st.Reloads+st.Failures > before.Reloads+before.Failures
		})
	}
	inForce := func(want []collector.BudgetRule) {
		t.Helper()
		exact, globs, err := col.BudgetsInForce()
		if err != nil {
			t.Fatal(err)
		}
		wantExact := map[uint64]time.Duration{}
		var wantGlobs []string
		for _, r := range want {
			if strings.Contains(r.Span, "*") {
				wantGlobs = append(wantGlobs, fmt.Sprint(r.Span, "=", r.Budget))
			} else {
				wantExact[snapshot.NameID(r.Span)] = r.Budget
			}
		}
		var gotGlobs []string
		for _, g := range globs {
			gotGlobs = append(gotGlobs, fmt.Sprint(g.Span, "=", g.Budget))
		}
		if !maps.Equal(exact, wantExact) || fmt.Sprint(gotGlobs) != fmt.Sprint(wantGlobs) {
			t.Fatalf("kernel budgets: %d exact, globs %v; want %d exact, globs %v", len(exact), gotGlobs, len(wantExact), wantGlobs)
		}
	}
	refused := func(step string, failuresBefore uint64) {
		t.Helper()
		if st := a.ReloadStats(); st.Failures != failuresBefore+1 {
			t.Fatalf("%s: reload failures %d, want %d", step, st.Failures, failuresBefore+1)
		}
		var st Status
		if err := json.Unmarshal([]byte(get("/api/status")), &st); err != nil {
			t.Fatal(err)
		}
		if st.ReloadFailures != failuresBefore+1 || st.LastReloadSuccessful || st.LastReload == "" {
			t.Errorf("%s: /api/status %+v, want the failure counted and shown", step, st)
		}
		if m := get("/metrics"); !strings.Contains(m, "spanwatch_config_last_reload_successful 0") ||
			!strings.Contains(m, fmt.Sprintf("spanwatch_rule_reload_failures_total %d", failuresBefore+1)) {
			t.Errorf("%s: /metrics:\n%s", step, grepLines(m, "reload"))
		}
		if !strings.Contains(get("/api/alerts"), `"Hot"`) {
			t.Errorf("%s: Hot no longer in /api/alerts", step)
		}
	}

	waitFor("Hot delivered firing", func() bool { return hooks.last("Hot") == "firing" })
	inForce(aRules)

	// 1. webhooks: removed, SIGHUP twice: a restart change, nothing
	// crashes, the webhooks keep delivering.
	write(rules + aBudgets)
	hup()
	hup()
	if p := a.PendingRestart(); len(p) != 1 || p[0].Key != "webhooks" || p[0].New != "none" {
		t.Errorf("pending restart %v, want webhooks: 1 webhooks -> none", p)
	}
	write(full)
	hup()
	if p := a.PendingRestart(); len(p) != 0 {
		t.Errorf("pending restart after the file came back: %v", p)
	}

	// 2. Truncated to 0 bytes: refused; restored: applied.
	for _, empty := range []string{"", "# only a comment\n"} {
		failures := a.ReloadStats().Failures
		write(empty)
		hup()
		refused(fmt.Sprintf("file %q", empty), failures)
		inForce(aRules)
		write(full)
		hup()
		if a.ReloadStats().LastError != nil {
			t.Fatalf("restored file refused: %v", a.ReloadStats().LastError)
		}
	}
	if hooks.last("Hot") != "firing" {
		t.Errorf("Hot's last notification is %q, want firing: an edit ended the alert", hooks.last("Hot"))
	}

	// 3. Budgets the kernel cannot hold: refused, the kernel's budgets
	// exactly as before.
	many, _ := budgets("b", 5000, 0)
	globs, _ := budgets("b", 0, 65)
	for _, tc := range []struct{ name, text string }{
		{"5000 exact budgets", many},
		{"65 glob budgets", globs},
		{"a glob of 65 bytes", "budgets:\n  - {span: \"" + strings.Repeat("x", 65) + "*\", budget: 1s}\n"},
		{"a 9000h budget", "budgets:\n  - {span: long, budget: 9000h}\n"},
	} {
		failures := a.ReloadStats().Failures
		write(rules + tc.text + webhooks)
		hup()
		refused(tc.name, failures)
		inForce(aRules)
	}

	// 4. A change the kernel takes: exactly the new budgets in force.
	bBudgets, bRules := budgets("b", 4000, 64)
	write(rules + bBudgets + webhooks)
	hup()
	if err := a.ReloadStats().LastError; err != nil {
		t.Fatal(err)
	}
	inForce(bRules)

	// 5. The rule removed: its alert is resolved, and the receiver hears.
	write("rules: []\ncollector:\n  interval: 200ms\n" + bBudgets + webhooks)
	hup()
	waitFor("Hot delivered resolved", func() bool { return hooks.last("Hot") == "resolved" })
	if strings.Contains(logs.String(), "panic") {
		t.Errorf("a panic in the log:\n%s", logs.String())
	}
}
