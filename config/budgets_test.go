package config

import (
	"strings"
	"testing"
	"time"

	"github.com/spanwatch/spanwatch/collector"
	"github.com/spanwatch/spanwatch/policy"
)

// The budget settings a file documents reach the collector: capture_stack
// (on by default), kernel_stack and sample_from_start, per budget.
func TestBudgetRulesCarryStackSettings(t *testing.T) {
	cfg, err := policy.Parse("rules.yaml", []byte(`
budgets:
  - {span: default, budget: 10ms}
  - {span: quiet, budget: 20ms, capture_stack: false}
  - {span: "db.*", budget: 30ms, kernel_stack: true}
  - {span: charge, budget: 100ms, sample_from_start: true}
`), policy.Options{})
	if err != nil {
		t.Fatal(err)
	}
	want := []collector.BudgetRule{
		{Span: "default", Budget: 10 * time.Millisecond},
		{Span: "quiet", Budget: 20 * time.Millisecond, NoUserStack: true},
		{Span: "db.*", Budget: 30 * time.Millisecond, KernelStack: true},
		{Span: "charge", Budget: 100 * time.Millisecond, SampleFromStart: true},
	}
	got := BudgetRules(cfg)
	if len(got) != len(want) {
		t.Fatalf("%d budget rules, want %d: %+v", len(got), len(want), got)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("budget %d: %+v, want %+v", i, got[i], want[i])
		}
	}
}

// sample_from_start is refused where the kernel could not honour it: on a
// glob (the kernel looks the span's start name up) and with
// capture_stack: false; the errors name the budget's place.
func TestSampleFromStartRefused(t *testing.T) {
	for _, tc := range []struct{ budget, want string }{
		{`{span: "db.*", budget: 30ms, sample_from_start: true}`, "sample_from_start needs an exact span name"},
		{`{span: db, budget: 30ms, sample_from_start: true, capture_stack: false}`, "cannot go with capture_stack: false"},
	} {
		cfg, err := policy.Parse("rules.yaml", []byte("budgets:\n  - "+tc.budget+"\n"), policy.Options{})
		if err != nil {
			t.Fatal(err)
		}
		errs := collector.CheckBudgets(BudgetRules(cfg))
		if len(errs) != 1 || !strings.Contains(errs[0].Error(), tc.want) {
			t.Errorf("%s: %v, want one error with %q", tc.budget, errs, tc.want)
		}
	}
	cfg, err := policy.Parse("rules.yaml", []byte("budgets:\n  - {span: db, budget: 30ms, sample_from_start: true}\n"), policy.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if errs := collector.CheckBudgets(BudgetRules(cfg)); len(errs) != 0 {
		t.Errorf("an exact name: %v", errs)
	}
}
