// Package rego_test checks the Rego example: the rule file loads, its unit
// tests pass, and the policy answers a snapshot as README.md says.
package rego_test

import (
	"context"
	"sort"
	"strings"
	"testing"

	"github.com/spanwatch/spanwatch/detector/ruletest"
	"github.com/spanwatch/spanwatch/policy"
	"github.com/spanwatch/spanwatch/snapshot"
)

func TestExampleChecks(t *testing.T) {
	cfg, err := policy.LoadFile("spanwatch.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if len(cfg.Rules) != 1 || len(cfg.Policies) != 1 || len(cfg.Budgets) != 2 {
		t.Errorf("%d rules, %d policies, %d budgets", len(cfg.Rules), len(cfg.Policies), len(cfg.Budgets))
	}
}

func TestExampleRuleTests(t *testing.T) {
	results, err := ruletest.RunFile(context.Background(), "spanwatch.test.yaml")
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range results {
		if !r.Passed() {
			t.Errorf("%s:\n%s", r.Name, strings.Join(r.Failures, "\n"))
		}
	}
}

func TestExamplePolicy(t *testing.T) {
	cfg, err := policy.LoadFile("spanwatch.yaml")
	if err != nil {
		t.Fatal(err)
	}
	snap := &snapshot.Snapshot{
		Host: "node1", WindowNs: 10e9,
		Series: []snapshot.Series{
			{Span: "checkout", Count: 200, Errors: 4, ErrorRatio: 0.02, P99Ns: 150e6},
		},
		Stats: snapshot.Stats{RingbufDrops: 12},
	}
	got, err := cfg.Policies[0].Eval(context.Background(), policy.Input(snap))
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, a := range got {
		names = append(names, a.Labels["alertname"]+":"+a.Annotations["summary"])
	}
	sort.Strings(names)
	want := []string{
		"CollectorDropping:12 overrun records dropped (ring buffer full)",
		"ErrorSLO:checkout error ratio is 2%, SLO 1%",
	}
	if strings.Join(names, "|") != strings.Join(want, "|") {
		t.Errorf("alerts:\n%s\nwant:\n%s", strings.Join(names, "\n"), strings.Join(want, "\n"))
	}
}
