package detector

import (
	"bytes"
	"context"
	"log/slog"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/spanwatch/spanwatch/policy"
)

// logBuffer is a log destination tests read while the detector writes.
type logBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestPolicyMemoryIsReported evaluates, beside a YAML rule and a plain
// policy, a policy whose memory follows a count a user controls: at 10^8
// it is cut off at the 64 MiB bound, logged once over two evaluations,
// counted twice, listed by PolicyCutOffs; the rule and the other policy
// fire; once the count is small again, the policy evaluates in full,
// fires, and its recovery is logged.
func TestPolicyMemoryIsReported(t *testing.T) {
	dir := writeFiles(t, map[string]string{
		"rules.yaml": "rules:\n  - {name: Slow, when: p99 > 1ms}\npolicies:\n  - {file: big.rego, over: 0s}\n  - file: plain.rego\npolicy_limits: {memory: 64MiB}\n",
		"big.rego": `package spanwatch

alerts contains {"labels": {"alertname": "Counted", "span": s.span}} if {
	some s in input.series
	count(numbers.range(1, s.count)) > 10
}
`,
		"plain.rego": `package spanwatch

alerts contains {"labels": {"alertname": "Plain", "span": s.span}} if {
	some s in input.series
}
`,
	})
	cfg, err := policy.LoadFile(filepath.Join(dir, "rules.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var logs logBuffer
	d := New(Config{Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	d.SetRules(cfg)
	flood := checkout(5 * time.Millisecond)
	flood.Count = 1e8
	var changed string
	for step := range 2 {
		c, err := d.Evaluate(context.Background(), snap(step, flood))
		if err != nil {
			t.Fatal(err)
		}
		changed += states(c)
	}
	if changed != "Slow:firing,Plain:firing" {
		t.Errorf("changed = %q: the rule and the other policy must still run", changed)
	}
	st := d.Stats()
	if st.PolicyMemoryCutOffs != 2 || st.PolicyErrors != 2 || st.PolicyTimeouts != 0 {
		t.Errorf("stats = %+v", st)
	}
	if n := strings.Count(logs.String(), "msg=policy_cut_off"); n != 1 || !strings.Contains(logs.String(), "reason=memory") || !strings.Contains(logs.String(), "limit=64MiB") {
		t.Errorf("cut-off logged %d times:\n%s", n, logs.String())
	}
	cuts := d.PolicyCutOffs()
	if len(cuts) != 1 || cuts[0].Policy != "big" || cuts[0].Reason != CutOffMemory || cuts[0].Count != 2 || !strings.Contains(cuts[0].Error, "numbers.range would build at least") {
		t.Errorf("cut-offs = %+v", cuts)
	}
	c, err := d.Evaluate(context.Background(), snap(2, checkout(5*time.Millisecond)))
	if err != nil {
		t.Fatal(err)
	}
	if got := states(c); got != "Counted:firing" {
		t.Errorf("after the flood: changed = %q", got)
	}
	if len(d.PolicyCutOffs()) != 0 || !strings.Contains(logs.String(), "msg=policy_recovered") {
		t.Errorf("no recovery: %+v\n%s", d.PolicyCutOffs(), logs.String())
	}
}

// TestPolicyMemoryBlame runs, on two workers under one heap watch, a
// policy that outgrows the bound a step at a time beside a slower one that
// keeps about 10 MiB of its own, under a 16 MiB bound: together they pass
// it and the watch cuts both off; each is tried again alone, and only the
// first is reported.
func TestPolicyMemoryBlame(t *testing.T) {
	if testing.Short() {
		t.Skip("allocates a few hundred MB")
	}
	dir := writeFiles(t, map[string]string{
		"rules.yaml": "policies:\n  - file: hog.rego\n  - file: modest.rego\npolicy_limits: {memory: 16MiB, timeout: 20s}\n",
		"hog.rego": `package spanwatch

alerts contains {"labels": {"alertname": "Hog"}} if {
	some s in input.series
	r := [z | some x in numbers.range(1, 5000); some y in numbers.range(1, 2000); z := x * y]
	count(r) > 0
}
`,
		"modest.rego": `package spanwatch

alerts contains {"labels": {"alertname": "Modest"}} if {
	some s in input.series
	r := [z | some x in numbers.range(1, 100); some y in numbers.range(1, 1000); some w in numbers.range(1, 8); w == 8; z := x * y]
	count(r) > 0
}
`,
	})
	cfg, err := policy.LoadFile(filepath.Join(dir, "rules.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var logs logBuffer
	d := New(Config{Logger: slog.New(slog.NewTextHandler(&logs, nil)), PolicyWorkers: 2})
	d.SetRules(cfg)
	c, err := d.Evaluate(context.Background(), snap(0, checkout(5*time.Millisecond)))
	if err != nil {
		t.Fatal(err)
	}
	if got := states(c); got != "Modest:firing" {
		t.Errorf("changed = %q, want the modest policy to fire", got)
	}
	if cuts := d.PolicyCutOffs(); len(cuts) != 1 || cuts[0].Policy != "hog" || cuts[0].Reason != CutOffMemory {
		t.Errorf("cut-offs = %+v\n%s", cuts, logs.String())
	}
	// Both were in flight when the watch cut them off, and both were
	// tried again.
	if st := d.Stats(); st.PolicyEvaluations != 4 || st.PolicyMemoryCutOffs != 1 {
		t.Errorf("stats = %+v, want 4 evaluations (2, then each alone) and 1 cut-off", st)
	}
}
