package detector

import (
	"context"
	"errors"
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

// TestReloaderLoadHook checks the caller's loader: its commit runs before
// the detector gets the rules, and when it fails nothing changes and the
// failure is counted; an edit that lands while the loader reads is seen by
// the next Check instead of being taken for what loaded.
func TestReloaderLoadHook(t *testing.T) {
	dir := t.TempDir()
	rules := filepath.Join(dir, "rules.yaml")
	tm := time.Now().Add(-time.Hour)
	write(t, rules, "rules:\n  - {name: A, when: p99 > 1s}\n", tm)

	d := New(Config{})
	var (
		commitErr  error
		committed  []string
		reloaded   int
		duringLoad func()
	)
	r := NewReloader(ReloaderConfig{Path: rules, Detector: d, Interval: -1,
		Load: func(path string) (*policy.Config, func() error, error) {
			cfg, err := policy.LoadFile(path)
			if duringLoad != nil {
				duringLoad()
				duringLoad = nil
			}
			if err != nil {
				return nil, nil, err
			}
			return cfg, func() error {
				if d.Rules() != nil && d.Rules() == cfg {
					t.Error("commit ran after the detector had the rules")
				}
				if commitErr != nil {
					return commitErr
				}
				committed = append(committed, cfg.Rules[0].Name)
				return nil
			}, nil
		},
		OnReload: func(*policy.Config) { reloaded++ },
	})
	if _, err := r.Load(); err != nil {
		t.Fatal(err)
	}

	// A commit that fails keeps everything.
	commitErr = errors.New("webhooks refused")
	write(t, rules, "rules:\n  - {name: B, when: p99 > 1s}\n", tm.Add(time.Second))
	if r.Check() {
		t.Error("a failed commit reported a reload")
	}
	if got := d.Rules().Rules[0].Name; got != "A" {
		t.Errorf("rules after a failed commit: %s", got)
	}
	if st := r.Stats(); st.Failures != 1 || !errors.Is(st.LastError, commitErr) || reloaded != 1 {
		t.Errorf("stats %+v, OnReload calls %d", st, reloaded)
	}

	// The same contents are not retried; once the commit works, an edit
	// goes through.
	commitErr = nil
	if r.Check() {
		t.Error("the same failed contents were retried")
	}
	write(t, rules, "rules:\n  - {name: C, when: p99 > 1s}\n", tm.Add(2*time.Second))
	if !r.Check() || d.Rules().Rules[0].Name != "C" {
		t.Fatalf("rules after a good edit: %s", d.Rules().Rules[0].Name)
	}

	// An edit while the loader reads: what loaded is C2, the file holds
	// D; the next Check loads D.
	write(t, rules, "rules:\n  - {name: C2, when: p99 > 1s}\n", tm.Add(3*time.Second))
	duringLoad = func() { write(t, rules, "rules:\n  - {name: D, when: p99 > 1s}\n", tm.Add(4*time.Second)) }
	if !r.Check() || d.Rules().Rules[0].Name != "C2" {
		t.Fatalf("rules = %s, want C2", d.Rules().Rules[0].Name)
	}
	if !r.Check() || d.Rules().Rules[0].Name != "D" {
		t.Errorf("the edit made during the load was lost: rules = %s", d.Rules().Rules[0].Name)
	}
	if want := []string{"A", "C", "C2", "D"}; strings.Join(committed, ",") != strings.Join(want, ",") {
		t.Errorf("committed %v, want %v", committed, want)
	}
}
