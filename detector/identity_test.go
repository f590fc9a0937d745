package detector

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/spanwatch/spanwatch/alert"
	"github.com/spanwatch/spanwatch/policy"
)

func TestNodeName(t *testing.T) {
	t.Setenv("NODE_NAME", "node-7")
	if got := NodeName(); got != "node-7" {
		t.Errorf("NodeName() with NODE_NAME = %q", got)
	}
	t.Setenv("NODE_NAME", "")
	h, _ := os.Hostname()
	if got := NodeName(); got != h {
		t.Errorf("NodeName() = %q, want the host name %q", got, h)
	}
	if got := DefaultExternalLabels(); got[NodeLabel] != h || len(got) != 1 {
		t.Errorf("DefaultExternalLabels() = %v", got)
	}
}

// TestExternalLabels checks that external labels reach every kind of
// alert (rule, policy, overrun), that the rule file's external_labels
// override and remove the detector's, and that an alert's own labels win.
func TestExternalLabels(t *testing.T) {
	dir := t.TempDir()
	rego := "package spanwatch\n\nalerts contains {\"labels\": {\"alertname\": \"FromRego\", \"span\": s.span}} if {\n\tsome s in input.series\n\ts.p99_ns > 200000000\n}\n"
	if err := os.WriteFile(filepath.Join(dir, "p.rego"), []byte(rego), 0o644); err != nil {
		t.Fatal(err)
	}
	const rules = `
budgets:
  - {span: checkout, budget: 250ms}
rules:
  - {name: Slow, span: checkout, when: p99 > 200ms, over: 0s}
  - {name: Pinned, span: checkout, when: p99 > 200ms, over: 0s, labels: {node: pinned}}
policies:
  - {file: p.rego, over: 0s}
%s`
	for _, tc := range []struct {
		name string
		base map[string]string // Config.ExternalLabels
		file string            // the rule file's external_labels section
		want map[string]string // the external labels every alert gets
	}{
		{"default node", nil, "", map[string]string{"node": NodeName()}},
		{"none", map[string]string{}, "", map[string]string{}},
		{"configured", map[string]string{"node": "a", "cluster": "eu1"}, "", map[string]string{"node": "a", "cluster": "eu1"}},
		{"file adds and overrides", map[string]string{"node": "a"}, "external_labels: {node: b, region: west}\n", map[string]string{"node": "b", "region": "west"}},
		{"file removes the node", map[string]string{"node": "a"}, "external_labels: {node: \"\", team: x}\n", map[string]string{"team": "x"}},
		{"null removes too", map[string]string{"node": "a"}, "external_labels:\n  node:\n", map[string]string{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(dir, "rules.yaml")
			if err := os.WriteFile(path, []byte(fmt.Sprintf(rules, tc.file)), 0o644); err != nil {
				t.Fatal(err)
			}
			rec := &recorder{}
			d := New(Config{Notifier: rec, ExternalLabels: tc.base})
			d.SetRules(mustLoad(t, path))
			ctx := context.Background()
			if _, err := d.Evaluate(ctx, snap(0, checkout(300*time.Millisecond))); err != nil {
				t.Fatal(err)
			}
			if _, err := d.Overrun(ctx, overrun(0, "checkout", "api")); err != nil {
				t.Fatal(err)
			}
			sent := rec.take()
			if len(sent) != 4 {
				t.Fatalf("sent %d alerts, want Slow, Pinned, FromRego and SpanOverBudget", len(sent))
			}
			for _, a := range sent {
				for k, v := range tc.want {
					if k == "node" && a.Name() == "Pinned" {
						v = "pinned" // the rule's own label wins
					}
					if a.Labels[k] != v {
						t.Errorf("%s: label %s = %q, want %q (labels %v)", a.Name(), k, a.Labels[k], v, a.Labels)
					}
				}
				for _, k := range []string{"node", "region", "team", "cluster"} {
					if _, ok := tc.want[k]; !ok && a.Labels[k] != "" && a.Name() != "Pinned" {
						t.Errorf("%s: unexpected label %s=%q", a.Name(), k, a.Labels[k])
					}
				}
				if a.Fingerprint != alert.Fingerprint(a.Labels) {
					t.Errorf("%s: fingerprint %s does not cover the labels %v", a.Name(), a.Fingerprint, a.Labels)
				}
			}
		})
	}
}

// TestResend checks the resend schedule of a firing alert: sent when it
// fires, again every ResendInterval, each time valid for 4 x max(resend,
// interval), also while keep_firing_for holds it, and resolved with
// EndsAt at the resolution.
func TestResendSchedule(t *testing.T) {
	rec := &recorder{}
	d := New(Config{Notifier: rec, ResendInterval: 30 * time.Second})
	d.SetRules(mustParse(t, "rules:\n  - {name: Slow, span: checkout, when: p99 > 200ms, over: 0s, keep_firing_for: 40s}\n"))
	ctx := context.Background()
	type step struct {
		slow    bool
		sent    string
		endsAt  time.Duration // of the alert sent, from t0; 0: none sent
		changed string
	}
	steps := []step{
		{true, "Slow:firing", 120 * time.Second, "Slow:firing"}, // 0s
		{true, "", 0, ""}, // 10s
		{true, "", 0, ""}, // 20s
		{true, "Slow:firing", 150 * time.Second, ""}, // 30s: resend
		{true, "", 0, ""},  // 40s
		{false, "", 0, ""}, // 50s: kept by keep_firing_for
		{false, "Slow:firing", 180 * time.Second, ""},               // 60s: still kept, resent
		{false, "", 0, ""},                                          // 70s
		{false, "", 0, ""},                                          // 80s
		{false, "Slow:resolved", 90 * time.Second, "Slow:resolved"}, // 90s: 40s after 50s
	}
	for i, st := range steps {
		s := snap(i)
		if st.slow {
			s = snap(i, checkout(300*time.Millisecond))
		}
		changed, err := d.Evaluate(ctx, s)
		if err != nil {
			t.Fatal(err)
		}
		sent := rec.take()
		if got := states(sent); got != st.sent {
			t.Errorf("step %d: sent %q, want %q", i, got, st.sent)
		}
		if got := states(changed); got != st.changed {
			t.Errorf("step %d: changed %q, want %q", i, got, st.changed)
		}
		for _, a := range sent {
			if !a.EndsAt.Equal(t0.Add(st.endsAt)) || !a.StartsAt.Equal(t0) {
				t.Errorf("step %d: sent startsAt %v endsAt %v, want %v and %v", i, a.StartsAt, a.EndsAt, t0, t0.Add(st.endsAt))
			}
		}
	}
	// The detector's own view of a firing alert has no end.
	d.Evaluate(ctx, snap(20, checkout(300*time.Millisecond)))
	if as := d.Alerts(); len(as) != 1 || !as[0].EndsAt.IsZero() {
		t.Errorf("Alerts() = %+v, want one firing alert without EndsAt", as)
	}
}

func mustLoad(t testing.TB, path string) *policy.Config {
	t.Helper()
	cfg, err := policy.LoadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}
