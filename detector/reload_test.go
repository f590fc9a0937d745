package detector

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/spanwatch/spanwatch/policy"
)

func write(t *testing.T, path, content string, mtime time.Time) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	// Filesystems with coarse timestamps could hide a rewrite within the
	// same tick; set distinct times explicitly.
	if err := os.Chtimes(path, mtime, mtime); err != nil {
		t.Fatal(err)
	}
}

func TestReloader(t *testing.T) {
	dir := t.TempDir()
	rules := filepath.Join(dir, "rules.yaml")
	rego := filepath.Join(dir, "p.rego")
	tm := time.Now().Add(-time.Hour)
	write(t, rules, "rules:\n  - {name: A, when: p99 > 1s}\npolicies:\n  - p.rego\n", tm)
	write(t, rego, "package spanwatch\n\nalerts contains {\"labels\": {\"alertname\": \"P1\"}} if false\n", tm)

	d := New(Config{})
	var seen []*policy.Config
	r := NewReloader(ReloaderConfig{Path: rules, Detector: d, Interval: -1, OnReload: func(c *policy.Config) { seen = append(seen, c) }})
	if _, err := r.Load(); err != nil {
		t.Fatal(err)
	}
	first := d.Rules()
	if first == nil || len(seen) != 1 {
		t.Fatal("Load did not install the rules")
	}
	if r.Check() {
		t.Error("Check reloaded without a change")
	}

	// Touch without changing: no reload.
	write(t, rules, "rules:\n  - {name: A, when: p99 > 1s}\npolicies:\n  - p.rego\n", tm.Add(time.Second))
	if r.Check() || d.Rules() != first {
		t.Error("a touch reloaded")
	}

	// A broken rule file keeps the old rules, and is reported once.
	write(t, rules, "rules:\n  - {name: A, when: p99 > 1 second}\n", tm.Add(2*time.Second))
	if r.Check() || d.Rules() != first {
		t.Error("a broken file replaced the rules")
	}
	st := r.Stats()
	if st.Failures != 1 || st.LastError == nil || !strings.Contains(st.LastError.Error(), "rules.yaml:2:") {
		t.Errorf("stats after a bad file = %+v", st)
	}
	if r.Check(); r.Stats().Failures != 1 {
		t.Error("the same broken contents were retried")
	}

	// Fixed: swapped in.
	write(t, rules, "rules:\n  - {name: B, when: p99 > 2s}\npolicies:\n  - p.rego\n", tm.Add(3*time.Second))
	if !r.Check() {
		t.Fatal("a fixed file did not reload")
	}
	if got := d.Rules(); got == first || got.Rules[0].Name != "B" {
		t.Errorf("rules after fix = %+v", got.Rules)
	}

	// A change to a referenced Rego file alone reloads too.
	before := d.Rules()
	write(t, rego, "package spanwatch\n\nalerts contains {\"labels\": {\"alertname\": \"P2\"}} if true\n", tm.Add(4*time.Second))
	if !r.Check() || d.Rules() == before {
		t.Error("a Rego change did not reload")
	}
	// A Rego file that calls http.send is refused; the old rules stay.
	before = d.Rules()
	write(t, rego, "package spanwatch\n\nalerts contains {\"labels\": {\"alertname\": \"P3\"}} if http.send({\"url\": \"http://x\", \"method\": \"GET\"}).status_code == 200\n", tm.Add(5*time.Second))
	if r.Check() || d.Rules() != before {
		t.Error("a sandbox violation replaced the rules")
	}
	if err := r.Reload(); err == nil || !strings.Contains(err.Error(), "http.send is not allowed") {
		t.Errorf("Reload = %v", err)
	}
	st = r.Stats()
	if st.Reloads != 2 || st.Failures != 3 || len(seen) != 3 {
		t.Errorf("stats = %+v, OnReload calls %d", st, len(seen))
	}
}

func TestReloaderRun(t *testing.T) {
	dir := t.TempDir()
	rules := filepath.Join(dir, "rules.yaml")
	tm := time.Now().Add(-time.Hour)
	write(t, rules, "rules: []\n", tm)
	d := New(Config{})
	r := NewReloader(ReloaderConfig{Path: rules, Detector: d, Interval: 10 * time.Millisecond})
	if _, err := r.Load(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- r.Run(ctx) }()
	write(t, rules, "rules:\n  - {name: New, when: count > 1}\n", tm.Add(time.Second))
	deadline := time.Now().Add(5 * time.Second)
	for len(d.Rules().Rules) == 0 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if len(d.Rules().Rules) != 1 {
		t.Error("Run did not pick up the change")
	}
}
