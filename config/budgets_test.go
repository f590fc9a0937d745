package config

import (
	"testing"
	"time"

	"github.com/spanwatch/spanwatch/collector"
	"github.com/spanwatch/spanwatch/policy"
)

// The budget settings a file documents reach the collector: capture_stack
// (on by default) and kernel_stack, per budget.
func TestBudgetRulesCarryStackSettings(t *testing.T) {
	cfg, err := policy.Parse("rules.yaml", []byte(`
budgets:
  - {span: default, budget: 10ms}
  - {span: quiet, budget: 20ms, capture_stack: false}
  - {span: "db.*", budget: 30ms, kernel_stack: true}
`), policy.Options{})
	if err != nil {
		t.Fatal(err)
	}
	want := []collector.BudgetRule{
		{Span: "default", Budget: 10 * time.Millisecond},
		{Span: "quiet", Budget: 20 * time.Millisecond, NoUserStack: true},
		{Span: "db.*", Budget: 30 * time.Millisecond, KernelStack: true},
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
