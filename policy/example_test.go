package policy_test

import (
	"context"
	"fmt"

	"github.com/spanwatch/spanwatch/policy"
	"github.com/spanwatch/spanwatch/snapshot"
)

func ExampleParse() {
	cfg, err := policy.Parse("rules.yaml", []byte(`
budgets:
  - {span: checkout, budget: 250ms}
rules:
  - name: CheckoutSlow
    span: checkout
    when: p99 > 200ms and count >= 10
    for: 30s
`), policy.Options{})
	if err != nil {
		fmt.Println(err)
		return
	}
	budget, _ := cfg.BudgetFor("checkout")
	r := cfg.Rules[0]
	s := &snapshot.Series{Span: "checkout", Count: 40, P99Ns: 212e6}
	v, holds := r.When.Holds(s)
	fmt.Println(budget, r.Name, r.For, holds, r.When.Terms[0].Metric.Format(v))
	// Output: 250ms CheckoutSlow 30s true 212ms
}

func ExampleParse_errors() {
	_, err := policy.Parse("rules.yaml", []byte(`
rules:
  - name: CheckoutSlow
    when: p99 > 200
    for: 30 seconds
`), policy.Options{})
	fmt.Println(err)
	// Output:
	// rules.yaml:4:11: when: p99 is a duration: "200" needs a unit (ns, us, µs, ms, s, m, h, d, w, y), e.g. 200ms
	// rules.yaml:5:10: for: bad duration "30 seconds": want a number with a unit (ns, us, µs, ms, s, m, h, d, w, y), e.g. 250ms, 1m30s or 1d
}

func ExamplePolicy_Eval() {
	// Policies usually come from files named in the rule file; an
	// in-memory FS works the same way.
	cfg, err := policy.Parse("rules.yaml", []byte("policies: [slow.rego]\n"), policy.Options{FS: exampleFS})
	if err != nil {
		fmt.Println(err)
		return
	}
	snap := &snapshot.Snapshot{Series: []snapshot.Series{{Span: "checkout", Count: 50, P99Ns: 3e9}}}
	alerts, err := cfg.Policies[0].Eval(context.Background(), policy.Input(snap))
	fmt.Println(alerts, err)
	// Output: [{map[alertname:VerySlow span:checkout] map[]}] <nil>
}
