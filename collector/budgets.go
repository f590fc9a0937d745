//go:build linux

package collector

import (
	"fmt"
	"path"
	"strings"
	"time"

	"github.com/spanwatch/spanwatch/bpf"
	"github.com/spanwatch/spanwatch/snapshot"
)

// A BudgetRule gives the spans whose name matches Span (an exact name or a
// path.Match glob) a budget: a span slower than it is counted as over budget
// and sends an overrun record with the thread's stack.
type BudgetRule struct {
	Span   string
	Budget time.Duration
	// KernelStack captures the kernel stack too.
	KernelStack bool
}

// BudgetFunc is kept for callers that decide budgets themselves.
type BudgetFunc func(span string) (budget time.Duration, kernelStack bool, ok bool)

// RulesFunc turns budget rules into a BudgetFunc: the first matching rule
// wins.
func RulesFunc(rules []BudgetRule) BudgetFunc {
	return func(span string) (time.Duration, bool, bool) {
		for _, r := range rules {
			if r.Span == span {
				return r.Budget, r.KernelStack, true
			}
			if ok, _ := path.Match(r.Span, span); ok {
				return r.Budget, r.KernelStack, true
			}
		}
		return 0, false, false
	}
}

// SetBudgets replaces the budgets. Exact names are written to the kernel at
// once; glob rules apply to every span name seen so far and to each new one
// at the next snapshot. Aggregated state is kept.
func (c *Collector) SetBudgets(rules []BudgetRule) error {
	for _, r := range rules {
		if _, err := path.Match(r.Span, ""); err != nil {
			return fmt.Errorf("budget for %q: bad pattern: %w", r.Span, err)
		}
		if r.Budget <= 0 {
			return fmt.Errorf("budget for %q: must be positive, not %s", r.Span, r.Budget)
		}
	}
	var exact []string
	var least uint64
	for _, r := range rules {
		if !strings.ContainsAny(r.Span, "*?[\\") {
			exact = append(exact, r.Span)
		}
		if least == 0 || uint64(r.Budget) < least {
			least = uint64(r.Budget)
		}
	}
	if err := c.SetBudgetFunc(RulesFunc(rules), exact); err != nil {
		return err
	}
	c.mu.Lock()
	c.minBudget = least
	c.budgetRules = append([]BudgetRule(nil), rules...)
	c.mu.Unlock()
	return nil
}

// SetBudgetFunc replaces the budgets with fn, which decides each span
// name's budget. The exact names are decided (and written to the kernel)
// at once; other names as they appear, at the next snapshot.
func (c *Collector) SetBudgetFunc(fn BudgetFunc, exact []string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.budgets = fn
	c.minBudget = 0
	c.budgetRules = nil
	for _, n := range exact {
		c.reader.names[snapshot.NameID(n)] = n
	}
	return c.applyBudgets(true)
}

// applyBudgets writes the budget of every known name; with all unset, only
// those of names not decided yet. c.mu is held. Series pick the change up
// through the budgets' generation.
func (c *Collector) applyBudgets(all bool) (err error) {
	r := c.reader
	changed := false
	defer func() {
		if changed {
			c.budgetGen++
			if e := c.objs.BudgetGen.Put(uint32(0), c.budgetGen); e != nil && err == nil {
				err = fmt.Errorf("bump budget generation: %w", e)
			}
		}
	}()
	for id, name := range r.names {
		if _, done := r.budgetDone[id]; done && !all {
			continue
		}
		r.budgetDone[id] = struct{}{}
		d, kernel, ok := c.budgets(name)
		if !ok {
			if _, had := r.budgets[id]; had {
				if err := c.objs.Budgets.Delete(id); err != nil {
					return fmt.Errorf("delete budget of %q: %w", name, err)
				}
				delete(r.budgets, id)
				changed = true
			}
			continue
		}
		b := bpf.SpanwatchBudget{BudgetNs: uint64(d)}
		if kernel {
			b.Flags = budgetCaptureKernel
		}
		if old, ok := r.budgets[id]; ok && old == uint64(d) && r.budgetFlags[id] == b.Flags {
			continue
		}
		if err := c.objs.Budgets.Put(id, b); err != nil {
			return fmt.Errorf("set budget of %q: %w", name, err)
		}
		r.budgets[id] = uint64(d)
		r.budgetFlags[id] = b.Flags
		changed = true
	}
	return nil
}

const budgetCaptureKernel = 1 // BUDGET_CAPTURE_KERNEL in bpf/aggregate.h
