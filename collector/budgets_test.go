//go:build linux

package collector

import (
	"errors"
	"fmt"
	"maps"
	"strings"
	"testing"
	"time"

	"github.com/spanwatch/spanwatch/internal/kernel"
	"github.com/spanwatch/spanwatch/snapshot"
)

// kernelBudgets reads the budgets in force from the kernel itself.
func kernelBudgets(t *testing.T, c *Collector) (map[uint64]uint64, []string) {
	t.Helper()
	exact, globs, err := c.BudgetsInForce()
	if err != nil {
		t.Fatal(err)
	}
	out := map[uint64]uint64{}
	for id, b := range exact {
		out[id] = uint64(b)
	}
	var gs []string
	for _, g := range globs {
		gs = append(gs, fmt.Sprintf("%s=%d", g.Span, g.Budget))
	}
	return out, gs
}

// wantBudgets is what the kernel should hold for rules. With the compat
// core (no glob matching in the kernel) the set in force holds an exact
// budget for each of the names seen (series the collector read) that a
// glob matches and no exact name does: the first glob's.
func wantBudgets(rules []BudgetRule, compat bool, seen ...string) (map[uint64]uint64, []string) {
	exact := map[uint64]uint64{}
	var globs []string
	for _, r := range rules {
		if strings.ContainsAny(r.Span, "*?") {
			globs = append(globs, fmt.Sprintf("%s=%d", r.Span, r.Budget))
		} else if _, dup := exact[snapshot.NameID(r.Span)]; !dup {
			exact[snapshot.NameID(r.Span)] = uint64(r.Budget)
		}
	}
	if compat {
		t, _ := compileBudgets(rules)
		for _, name := range seen {
			id := snapshot.NameID(name)
			if _, ok := exact[id]; ok {
				continue
			}
			if b := t.lookup(name); b != nil {
				exact[id] = uint64(b.rule.Budget)
			}
		}
	}
	return exact, globs
}

func budgetConfig(prefix string, exact, globs int, budget time.Duration) []BudgetRule {
	var out []BudgetRule
	for i := 0; i < exact; i++ {
		out = append(out, BudgetRule{Span: fmt.Sprintf("%s.exact.%d", prefix, i), Budget: budget})
	}
	for i := 0; i < globs; i++ {
		out = append(out, BudgetRule{Span: fmt.Sprintf("%s.glob%d.*", prefix, i), Budget: budget})
	}
	return out
}

// TestBudgetsAllOrNothing changes the budgets in every way that used to
// leave the kernel with a mix of the old and new ones (too many exact
// names, too many globs, a write that fails half way), and reads the
// kernel's maps after each: the budgets in force are exactly the old set
// after a refused change and exactly the new set after an applied one,
// and spans are judged by them.
//
// With the compat core the names a glob matches get exact budgets, in the
// set a change writes: they come in force with it, and go with it.
func TestBudgetsAllOrNothing(t *testing.T) {
	forEachCore(t, testBudgetsAllOrNothing)
}

func testBudgetsAllOrNothing(t *testing.T, core kernel.Core) {
	ct := newCoreTest(t, Config{MaxSeries: 8192, HistogramCells: 1 << 14, Core: core})
	c := ct.c
	// The names spans are sent for, each read once under every budget
	// (1ns) first: the compat core judges a name by a glob from the
	// collector's first read of it (the full core from its first span:
	// TestCoreGlobBudgetsFirstSight).
	seen := []string{"a.exact.7", "a.glob3.x", "b.exact.7", "b.glob3.x", "b.glob3.y"}
	var warm []entry
	for _, n := range seen {
		warm = append(warm, entry{Name: n, Cgroup: 1, Value: 1})
	}
	ct.aggregate(t, warm)
	ct.snapshot(t)
	check := func(step string, rules []BudgetRule) {
		t.Helper()
		gotE, gotG := kernelBudgets(t, c)
		wantE, wantG := wantBudgets(rules, core == kernel.CoreCompat, seen...)
		if !maps.Equal(gotE, wantE) {
			t.Fatalf("%s: kernel holds %d exact budgets, want %d (the set in force differs)", step, len(gotE), len(wantE))
		}
		if strings.Join(gotG, ",") != strings.Join(wantG, ",") {
			t.Fatalf("%s: kernel globs %v, want %v", step, gotG, wantG)
		}
	}
	a := budgetConfig("a", 3000, 10, time.Millisecond)
	if err := c.SetBudgets(a); err != nil {
		t.Fatal(err)
	}
	check("first set", a)

	for _, tc := range []struct {
		name  string
		rules []BudgetRule
	}{
		{"5000 exact budgets", budgetConfig("b", 5000, 0, 2*time.Millisecond)},
		{"65 glob budgets", budgetConfig("b", 10, 65, 2*time.Millisecond)},
		{"a glob longer than 64 bytes", append(budgetConfig("b", 100, 0, 2*time.Millisecond), BudgetRule{Span: strings.Repeat("x", 65) + "*", Budget: time.Millisecond})},
		{"a 9000h budget", append(budgetConfig("b", 100, 1, 2*time.Millisecond), BudgetRule{Span: "long", Budget: 9000 * time.Hour})},
	} {
		err := c.SetBudgets(tc.rules)
		var be *BudgetError
		if !errors.As(err, &be) {
			t.Fatalf("%s: SetBudgets returned %v, want a BudgetError", tc.name, err)
		}
		check(tc.name+" (refused)", a)
	}

	// A valid change whose writes fail half way (after 1500 of its 4000
	// exact names): the budgets in force stay a's.
	b := budgetConfig("b", 4000, 20, 2*time.Millisecond)
	writes := 0
	budgetWriteHook = func() error {
		if writes++; writes > 1500 {
			return errors.New("injected write failure")
		}
		return nil
	}
	err := c.SetBudgets(b)
	budgetWriteHook = nil
	if err == nil || !strings.Contains(err.Error(), "injected") {
		t.Fatalf("SetBudgets with failing writes: %v", err)
	}
	check("change failed half way", a)

	// Spans are judged by a alone: a's names are over their 1ms budget at
	// 1.5ms, b's names have none.
	ct.aggregate(t, []entry{
		{Name: "a.exact.7", Cgroup: 1, Value: 1_500_000},
		{Name: "a.glob3.x", Cgroup: 1, Value: 1_500_000},
		{Name: "b.exact.7", Cgroup: 1, Value: 1_500_000},
		{Name: "b.glob3.x", Cgroup: 1, Value: 1_500_000},
	})
	_, got := ct.snapshot(t)
	for name, want := range map[string]uint64{"a.exact.7": 1, "a.glob3.x": 1, "b.exact.7": 0, "b.glob3.x": 0} {
		if got[name].OverBudget != want {
			t.Errorf("after the failed change, %s: over budget %d, want %d", name, got[name].OverBudget, want)
		}
	}

	// The same change applied: b exactly, a gone; and back to a, so both
	// sets have been in force and rewritten.
	if err := c.SetBudgets(b); err != nil {
		t.Fatal(err)
	}
	check("second set", b)
	ct.aggregate(t, []entry{
		{Name: "a.exact.7", Cgroup: 1, Value: 2_500_000},
		{Name: "b.exact.7", Cgroup: 1, Value: 2_500_000},
		{Name: "b.glob3.y", Cgroup: 1, Value: 2_500_000},
	})
	_, got = ct.snapshot(t)
	for name, want := range map[string]uint64{"a.exact.7": 0, "b.exact.7": 1, "b.glob3.y": 1} {
		if got[name].OverBudget != want {
			t.Errorf("after the change, %s: over budget %d, want %d", name, got[name].OverBudget, want)
		}
	}
	for i := 0; i < 3; i++ {
		if err := c.SetBudgets(a); err != nil {
			t.Fatal(err)
		}
		check("a again", a)
		if err := c.SetBudgets(b); err != nil {
			t.Fatal(err)
		}
		check("b again", b)
	}

	// A prepared change is invisible until Commit, and Abort drops it.
	ch, err := c.PrepareBudgets(a)
	if err != nil {
		t.Fatal(err)
	}
	check("prepared, not committed", b)
	ch.Abort()
	check("aborted", b)
	ch, err = c.PrepareBudgets(a)
	if err != nil {
		t.Fatal(err)
	}
	if err := ch.Commit(); err != nil {
		t.Fatal(err)
	}
	check("committed", a)
}
