package config

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
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

// coordinatorFor loads path and returns its coordinator after the first
// load.
func coordinatorFor(t *testing.T, path string, interval time.Duration) *Coordinator {
	t.Helper()
	cfg, err := Load(path, LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	c := NewCoordinator(cfg, CoordinatorConfig{Interval: interval})
	if _, err := c.Load(); err != nil {
		t.Fatal(err)
	}
	return c
}

// TestCoordinator checks what a reload watches and when it applies: a
// touch does not reload, a broken file keeps what runs and is reported
// once, a fixed file and an edit of a Rego file it names reload, and a
// sandbox violation is refused.
func TestCoordinator(t *testing.T) {
	dir := t.TempDir()
	rules := filepath.Join(dir, "rules.yaml")
	rego := filepath.Join(dir, "p.rego")
	tm := time.Now().Add(-time.Hour)
	write(t, rules, "rules:\n  - {name: A, when: p99 > 1s}\npolicies:\n  - p.rego\n", tm)
	write(t, rego, "package spanwatch\n\nalerts contains {\"labels\": {\"alertname\": \"P1\"}} if false\n", tm)

	c := coordinatorFor(t, rules, -1)
	var seen []*Config
	c.Subscribe(func(next *Config) (Step, error) {
		return Step{Commit: func() error { seen = append(seen, next); return nil }}, nil
	})
	first := c.Config()
	if first == nil || len(first.Rules.Rules) != 1 {
		t.Fatal("Load did not make the file's configuration the running one")
	}
	if c.Check() {
		t.Error("Check reloaded without a change")
	}

	// Touch without changing: no reload.
	write(t, rules, "rules:\n  - {name: A, when: p99 > 1s}\npolicies:\n  - p.rego\n", tm.Add(time.Second))
	if c.Check() || c.Config() != first {
		t.Error("a touch reloaded")
	}

	// A broken rule file keeps the old rules, and is reported once.
	write(t, rules, "rules:\n  - {name: A, when: p99 > 1 second}\n", tm.Add(2*time.Second))
	if c.Check() || c.Config() != first {
		t.Error("a broken file replaced the rules")
	}
	st := c.Stats()
	if st.Failures != 1 || st.LastError == nil || !strings.Contains(st.LastError.Error(), "rules.yaml:2:") {
		t.Errorf("stats after a bad file = %+v", st)
	}
	if c.Check(); c.Stats().Failures != 1 {
		t.Error("the same broken contents were retried")
	}

	// Fixed: swapped in.
	write(t, rules, "rules:\n  - {name: B, when: p99 > 2s}\npolicies:\n  - p.rego\n", tm.Add(3*time.Second))
	if !c.Check() {
		t.Fatal("a fixed file did not reload")
	}
	if got := c.Config(); got == first || got.Rules.Rules[0].Name != "B" {
		t.Errorf("rules after fix = %+v", got.Rules.Rules)
	}

	// A change to a referenced Rego file alone reloads too.
	before := c.Config()
	write(t, rego, "package spanwatch\n\nalerts contains {\"labels\": {\"alertname\": \"P2\"}} if true\n", tm.Add(4*time.Second))
	if !c.Check() || c.Config() == before {
		t.Error("a Rego change did not reload")
	}
	// A Rego file that calls http.send is refused; the old rules stay.
	before = c.Config()
	write(t, rego, "package spanwatch\n\nalerts contains {\"labels\": {\"alertname\": \"P3\"}} if http.send({\"url\": \"http://x\", \"method\": \"GET\"}).status_code == 200\n", tm.Add(5*time.Second))
	if c.Check() || c.Config() != before {
		t.Error("a sandbox violation replaced the rules")
	}
	if err := c.Reload(); err == nil || !strings.Contains(err.Error(), "http.send is not allowed") {
		t.Errorf("Reload = %v", err)
	}
	st = c.Stats()
	if st.Reloads != 2 || st.Failures != 3 || len(seen) != 2 {
		t.Errorf("stats = %+v, subscriber commits %d", st, len(seen))
	}
	for i, cfg := range seen {
		if cfg == first {
			t.Errorf("commit %d: handed the first configuration again", i)
		}
	}
}

func TestCoordinatorRun(t *testing.T) {
	dir := t.TempDir()
	rules := filepath.Join(dir, "rules.yaml")
	tm := time.Now().Add(-time.Hour)
	write(t, rules, "rules: []\n", tm)
	c := coordinatorFor(t, rules, 10*time.Millisecond)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- c.Run(ctx) }()
	write(t, rules, "rules:\n  - {name: New, when: count > 1}\n", tm.Add(time.Second))
	deadline := time.Now().Add(5 * time.Second)
	for len(c.Config().Rules.Rules) == 0 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if len(c.Config().Rules.Rules) != 1 {
		t.Error("Run did not pick up the change")
	}
}

// TestCoordinatorTransaction checks that a reload applies completely or
// not at all: the subscribers' commits run in order, after every one
// prepared; a subscriber that refuses to prepare aborts those prepared
// before it and nothing commits; a first commit that fails keeps
// everything; either failure is counted; and an edit that lands while a
// reload is under way is seen by the next Check instead of being taken
// for what loaded.
func TestCoordinatorTransaction(t *testing.T) {
	dir := t.TempDir()
	rules := filepath.Join(dir, "rules.yaml")
	tm := time.Now().Add(-time.Hour)
	write(t, rules, "rules:\n  - {name: A, when: p99 > 1s}\n", tm)
	c := coordinatorFor(t, rules, -1)

	var (
		commitErr  error
		prepareErr error
		committed  []string
		aborted    int
		applied    *Config // the second subscriber's
		duringLoad func()
	)
	c.Subscribe(
		// First: the one commit that may fail (the webhooks' regrouping
		// of the outbox).
		func(next *Config) (Step, error) {
			return Step{
				Commit: func() error {
					if applied == next {
						t.Error("the first commit ran after the second")
					}
					if commitErr != nil {
						return commitErr
					}
					committed = append(committed, next.Rules.Rules[0].Name)
					return nil
				},
				Abort: func() { aborted++ },
			}, nil
		},
		// Second: one that may refuse to prepare (budgets the kernel
		// cannot hold), and an edit while the reload is under way.
		func(next *Config) (Step, error) {
			if duringLoad != nil {
				duringLoad()
				duringLoad = nil
			}
			if prepareErr != nil {
				return Step{}, prepareErr
			}
			return Step{Commit: func() error { applied = next; return nil }, Abort: func() { aborted++ }}, nil
		},
	)

	// A commit that fails keeps everything.
	commitErr = errors.New("webhooks refused")
	write(t, rules, "rules:\n  - {name: B, when: p99 > 1s}\n", tm.Add(time.Second))
	if c.Check() {
		t.Error("a failed commit reported a reload")
	}
	if got := c.Config().Rules.Rules[0].Name; got != "A" || applied != nil {
		t.Errorf("rules after a failed commit: %s (second subscriber applied %v)", got, applied != nil)
	}
	if st := c.Stats(); st.Failures != 1 || !errors.Is(st.LastError, commitErr) || aborted != 1 {
		t.Errorf("stats %+v, aborts %d (want the second subscriber's)", st, aborted)
	}

	// The same contents are not retried; once the commit works, an edit
	// goes through.
	commitErr = nil
	if c.Check() {
		t.Error("the same failed contents were retried")
	}
	write(t, rules, "rules:\n  - {name: C, when: p99 > 1s}\n", tm.Add(2*time.Second))
	if !c.Check() || c.Config().Rules.Rules[0].Name != "C" || applied != c.Config() {
		t.Fatalf("rules after a good edit: %s", c.Config().Rules.Rules[0].Name)
	}

	// A subscriber that refuses aborts the one prepared before it;
	// nothing commits.
	aborted = 0
	prepareErr = errors.New("budgets: more than 64 glob budgets")
	write(t, rules, "rules:\n  - {name: E, when: p99 > 1s}\n", tm.Add(3*time.Second))
	if c.Check() || c.Config().Rules.Rules[0].Name != "C" || aborted != 1 || committed[len(committed)-1] != "C" {
		t.Errorf("a refused prepare: rules %s, aborts %d, committed %v", c.Config().Rules.Rules[0].Name, aborted, committed)
	}
	if st := c.Stats(); st.Failures != 2 || !errors.Is(st.LastError, prepareErr) {
		t.Errorf("stats %+v", st)
	}
	prepareErr = nil

	// An edit while the reload is under way: what loaded is C2, the file
	// holds D; the next Check loads D.
	write(t, rules, "rules:\n  - {name: C2, when: p99 > 1s}\n", tm.Add(4*time.Second))
	duringLoad = func() { write(t, rules, "rules:\n  - {name: D, when: p99 > 1s}\n", tm.Add(5*time.Second)) }
	if !c.Check() || c.Config().Rules.Rules[0].Name != "C2" {
		t.Fatalf("rules = %s, want C2", c.Config().Rules.Rules[0].Name)
	}
	if !c.Check() || c.Config().Rules.Rules[0].Name != "D" {
		t.Errorf("the edit made during the load was lost: rules = %s", c.Config().Rules.Rules[0].Name)
	}
	if want := []string{"C", "C2", "D"}; strings.Join(committed, ",") != strings.Join(want, ",") {
		t.Errorf("committed %v, want %v", committed, want)
	}
}

// TestCoordinatorWithoutFile checks a configuration parsed from memory:
// Load hands it back, Reload refuses, Check does nothing.
func TestCoordinatorWithoutFile(t *testing.T) {
	cfg, err := Parse("demo.yaml (built-in)", []byte("rules: []\n"), LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	c := NewCoordinator(cfg, CoordinatorConfig{})
	if got, err := c.Load(); err != nil || got != cfg {
		t.Fatalf("Load = %v, %v", got, err)
	}
	if c.Reloadable() || c.Reload() == nil || c.Check() {
		t.Error("a configuration without a file reloads")
	}
}
