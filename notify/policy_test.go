package notify_test

import (
	"strings"
	"testing"

	"github.com/spanwatch/spanwatch/notify"
	"github.com/spanwatch/spanwatch/policy"
)

// TestWithPolicyLoader reads one whole configuration file the way the
// agent does: the policy package parses it and leaves webhooks: and
// routing: as YAML nodes, which ParseConfig decodes with their positions in
// the same file.
func TestWithPolicyLoader(t *testing.T) {
	const file = `budgets:
  - span: checkout
    budget: 250ms
rules:
  - name: CheckoutSlow
    span: checkout
    when: p99 > 200ms
webhooks:
  - name: ops
    url: https://alerts.example/hook
    group_by: [alertname, span]
    %s
routing:
  outbox: {path: /var/lib/spanwatch/outbox.db, max_entries: 500}
`
	pc, err := policy.Parse("spanwatch.yaml", []byte(strings.Replace(file, "%s", "send_resolved: false", 1)), policy.Options{})
	if err != nil {
		t.Fatal(err)
	}
	c, err := notify.ParseConfig(pc.Name, &pc.Webhooks, &pc.Routing)
	if err != nil {
		t.Fatal(err)
	}
	if w := c.Webhooks[0]; w.Name != "ops" || w.SendResolved || len(w.GroupBy) != 2 || c.Routing.Outbox.MaxEntries != 500 {
		t.Errorf("config %+v", c)
	}

	pc, err = policy.Parse("spanwatch.yaml", []byte(strings.Replace(file, "%s", "send_resolvd: false", 1)), policy.Options{})
	if err != nil {
		t.Fatal(err)
	}
	_, err = notify.ParseConfig(pc.Name, &pc.Webhooks, &pc.Routing)
	if err == nil || !strings.HasPrefix(err.Error(), `spanwatch.yaml:12:5: unknown key "send_resolvd"`) {
		t.Errorf("error %v, want it located in the whole file", err)
	}
}
