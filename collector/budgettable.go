package collector

import (
	"fmt"
	"time"

	"github.com/spanwatch/spanwatch/bpf"
	"github.com/spanwatch/spanwatch/internal/glob"
	"github.com/spanwatch/spanwatch/snapshot"
)

// This file builds on every system: `spanwatch check` validates budgets
// with the same code (CheckBudgets) as the collector that pushes them
// into the kernel (SetBudgets), so that a file check accepts is one the
// kernel takes.

// A BudgetRule gives the spans whose name matches Span a budget: a span
// slower than it is counted as over budget and sends an overrun record,
// with the thread's user stack unless NoUserStack, and its kernel stack too
// with KernelStack.
type BudgetRule struct {
	// Span is an exact name or a glob (internal/glob: '*', '?', '\',
	// a leading '!'), as in rule files.
	Span   string
	Budget time.Duration
	// NoUserStack sends the overrun without a user stack: no stack walk
	// at all (capture_stack: false).
	NoUserStack bool
	// KernelStack captures the kernel stack too.
	KernelStack bool
	// SampleFromStart samples the span's thread on the CPU from the
	// span's start rather than from its budget on, and keeps the samples
	// of a span that ends over its budget (internal/inflight's
	// Watcher.SetEarly): an exact name only, with a user stack.
	SampleFromStart bool
}

// Budget limits, the kernel's: an exact name is at most snapshot.NameLen-1
// bytes, and at most MaxExactBudgets of them (BUDGET_MAX: the budgets map
// holds two sets of that many, the one in force and the one a reload
// writes); a glob at most MaxGlobLen bytes of pattern (GLOB_LEN), and at
// most MaxGlobBudgets globs (GLOB_MAX); a budget at most MaxBudget
// (BUDGET_NS_BITS: the kernel's cache field, 4.9 hours).
const (
	MaxExactBudgets = int(bpf.SpanwatchCoreSizesBUDGET_MAX)
	MaxGlobBudgets  = int(bpf.SpanwatchCoreSizesGLOB_MAX)
	MaxGlobLen      = int(bpf.SpanwatchCoreSizesGLOB_LEN)
	MaxBudget       = time.Duration(1<<bpf.SpanwatchBudgetBitsBUDGET_NS_BITS - 1)
	budgetSets      = int(bpf.SpanwatchCoreSizesBUDGET_SETS)
	captureUser     = uint32(bpf.SpanwatchBudgetFlagsBUDGET_CAPTURE_USER)
	captureKernl    = uint32(bpf.SpanwatchBudgetFlagsBUDGET_CAPTURE_KERNEL)
)

// A BudgetError is a budget the kernel would not take: Index is its place
// in the rules given to CheckBudgets (for a limit on how many there are,
// the first one past it).
type BudgetError struct {
	Index int
	Span  string
	Msg   string
}

func (e *BudgetError) Error() string { return fmt.Sprintf("budget for %q: %s", e.Span, e.Msg) }

type compiledBudget struct {
	rule  BudgetRule
	glob  *glob.Glob
	flags uint32
}

// budgetTable is the budgets as the kernel has them: exact names by id,
// globs in order. Exact names win over globs; among globs the first match
// wins (as policy.Config.BudgetEntry decides).
type budgetTable struct {
	exact map[uint64]*compiledBudget
	globs []*compiledBudget
}

func (t *budgetTable) lookup(name string) *compiledBudget {
	if t == nil {
		return nil
	}
	if b, ok := t.exact[snapshot.NameID(name)]; ok {
		return b
	}
	for _, b := range t.globs {
		if b.glob.Match(name) {
			return b
		}
	}
	return nil
}

// CheckBudgets validates rules the way SetBudgets does, without a
// collector or a kernel: spanwatch check and run call it through
// config.Load. The errors are *BudgetError, one per problem.
func CheckBudgets(rules []BudgetRule) []error {
	_, errs := compileBudgets(rules)
	return errs
}

func compileBudgets(rules []BudgetRule) (*budgetTable, []error) {
	t := &budgetTable{exact: map[uint64]*compiledBudget{}}
	var errs []error
	exactOver, globOver, firstExactOver, firstGlobOver := 0, 0, 0, 0
	bad := func(i int, format string, a ...any) {
		errs = append(errs, &BudgetError{Index: i, Span: rules[i].Span, Msg: fmt.Sprintf(format, a...)})
	}
	for i, r := range rules {
		if r.Budget <= 0 || r.Budget > MaxBudget {
			bad(i, "%s is out of range: 1ns to %s (the kernel keeps a budget in 44 bits of nanoseconds)", r.Budget, MaxBudget)
			continue
		}
		g, err := glob.Compile(r.Span)
		if err != nil {
			bad(i, "%v", err)
			continue
		}
		b := &compiledBudget{rule: r, glob: g, flags: captureUser}
		if r.NoUserStack {
			b.flags = 0
		}
		if r.KernelStack {
			b.flags |= captureKernl
		}
		_, exact := g.Exact()
		switch {
		case r.SampleFromStart && !exact:
			bad(i, "sample_from_start needs an exact span name, not a glob: the kernel looks it up by the name the span starts with")
			continue
		case r.SampleFromStart && r.NoUserStack:
			bad(i, "sample_from_start takes stacks: it cannot go with capture_stack: false")
			continue
		}
		if name, ok := g.Exact(); ok {
			if len(name) > snapshot.NameLen-1 {
				bad(i, "a name is at most %d bytes, this one is %d", snapshot.NameLen-1, len(name))
				continue
			}
			id := snapshot.NameID(name)
			if _, dup := t.exact[id]; dup {
				continue // the first wins, as in policy
			}
			if len(t.exact) == MaxExactBudgets {
				if exactOver++; exactOver == 1 {
					firstExactOver = i
				}
				continue
			}
			t.exact[id] = b
			continue
		}
		if kinds, _, _ := g.Tokens(); len(kinds) > MaxGlobLen {
			bad(i, "a glob pattern is at most %d bytes once unescaped (a '*' or '?' counts one), this one is %d: the kernel matches it", MaxGlobLen, len(kinds))
			continue
		}
		if len(t.globs) == MaxGlobBudgets {
			if globOver++; globOver == 1 {
				firstGlobOver = i
			}
			continue
		}
		t.globs = append(t.globs, b)
	}
	// A limit on how many is reported once, at the first budget past it.
	if exactOver > 0 {
		bad(firstExactOver, "more than %d budgets with exact names (%d): the kernel holds %d (cover the others with a glob)", MaxExactBudgets, MaxExactBudgets+exactOver, MaxExactBudgets)
	}
	if globOver > 0 {
		bad(firstGlobOver, "more than %d glob budgets (%d): the kernel matches at most %d (give exact names for the others)", MaxGlobBudgets, MaxGlobBudgets+globOver, MaxGlobBudgets)
	}
	return t, errs
}
