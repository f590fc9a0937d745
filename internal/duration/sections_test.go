package duration_test

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/spanwatch/spanwatch/config"
)

// TestEverySectionOneSyntax parses one configuration file whose every
// duration uses the units Go's time.ParseDuration lacks (d, w) or
// fractions, through package config, which hands each section to the
// package that decodes it, and checks each got the same value: there is
// one duration syntax, not one per section.
func TestEverySectionOneSyntax(t *testing.T) {
	const day = 24 * time.Hour
	src := []byte(`
budgets:
  - span: checkout
    budget: 1.5s
rules:
  - name: Slow
    span: checkout
    when: p99 > 1d
    for: 1d
    keep_firing_for: 1w
webhooks:
  - name: ops
    url: http://127.0.0.1:1/hook
    timeout: 1m30s
    group_wait: 1d
    group_interval: 1d12h
    repeat_interval: 1w
    max_age: 2d
metrics:
  series_ttl: 1d
routing:
  outbox: {path: ` + filepath.Join(t.TempDir(), "outbox.db") + `}
`)
	all, err := config.Parse("rules.yaml", src, config.LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cfg := all.Rules
	r := cfg.Rules[0]
	if r.For != day || r.KeepFiringFor != 7*day || cfg.Budgets[0].Budget != 1500*time.Millisecond {
		t.Errorf("rules: for %v, keep_firing_for %v, budget %v", r.For, r.KeepFiringFor, cfg.Budgets[0].Budget)
	}
	w := all.Notify.Webhooks[0]
	for name, got := range map[string]time.Duration{
		"timeout": w.Timeout.D(), "group_wait": w.GroupWait.D(), "group_interval": w.GroupInterval.D(),
		"repeat_interval": w.RepeatInterval.D(), "max_age": w.MaxAge.D(),
	} {
		want := map[string]time.Duration{"timeout": 90 * time.Second, "group_wait": day, "group_interval": 36 * time.Hour, "repeat_interval": 7 * day, "max_age": 2 * day}[name]
		if got != want {
			t.Errorf("webhooks: %s = %v, want %v", name, got, want)
		}
	}
	if m := all.Metrics; m.SeriesTTL != day {
		t.Errorf("metrics: series_ttl = %v, want 1d", m.SeriesTTL)
	}
}
