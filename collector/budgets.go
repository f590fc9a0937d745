//go:build linux

package collector

import (
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/cilium/ebpf"

	"github.com/spanwatch/spanwatch/bpf"
	"github.com/spanwatch/spanwatch/internal/glob"
	"github.com/spanwatch/spanwatch/snapshot"
)

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
}

// Budget limits: an exact name is at most snapshot.NameLen-1 bytes; a glob
// at most 64 bytes of pattern (GLOB_LEN), and at most 64 globs (GLOB_MAX);
// a budget below 2^44 ns (4.9 hours, BUDGET_NS_BITS: the kernel's cache
// field).
const (
	maxGlobs     = int(bpf.SpanwatchCoreSizesGLOB_MAX)
	maxGlobLen   = int(bpf.SpanwatchCoreSizesGLOB_LEN)
	maxBudget    = time.Duration(1<<bpf.SpanwatchBudgetBitsBUDGET_NS_BITS - 1)
	captureUser  = uint32(bpf.SpanwatchBudgetFlagsBUDGET_CAPTURE_USER)
	captureKernl = uint32(bpf.SpanwatchBudgetFlagsBUDGET_CAPTURE_KERNEL)
)

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

// CheckBudgets validates rules the way SetBudgets would, without a
// collector: for `spanwatch check`.
func CheckBudgets(rules []BudgetRule) error {
	_, err := compileBudgets(rules)
	return err
}

func compileBudgets(rules []BudgetRule) (*budgetTable, error) {
	t := &budgetTable{exact: map[uint64]*compiledBudget{}}
	var errs []error
	for _, r := range rules {
		if r.Budget <= 0 || r.Budget > maxBudget {
			errs = append(errs, fmt.Errorf("budget for %q: %s is out of range (1ns to %s)", r.Span, r.Budget, maxBudget))
			continue
		}
		g, err := glob.Compile(r.Span)
		if err != nil {
			errs = append(errs, fmt.Errorf("budget for %q: %w", r.Span, err))
			continue
		}
		b := &compiledBudget{rule: r, glob: g, flags: captureUser}
		if r.NoUserStack {
			b.flags = 0
		}
		if r.KernelStack {
			b.flags |= captureKernl
		}
		if name, ok := g.Exact(); ok {
			if len(name) > snapshot.NameLen-1 {
				errs = append(errs, fmt.Errorf("budget for %q: a name is at most %d bytes", r.Span, snapshot.NameLen-1))
				continue
			}
			if _, dup := t.exact[snapshot.NameID(name)]; !dup {
				t.exact[snapshot.NameID(name)] = b
			}
			continue
		}
		kinds, _, _ := g.Tokens()
		if len(kinds) > maxGlobLen {
			errs = append(errs, fmt.Errorf("budget for %q: a glob pattern is at most %d bytes", r.Span, maxGlobLen))
			continue
		}
		t.globs = append(t.globs, b)
	}
	if len(t.globs) > maxGlobs {
		errs = append(errs, fmt.Errorf("%d glob budgets: at most %d (give exact names for the others)", len(t.globs), maxGlobs))
	}
	return t, errors.Join(errs...)
}

// SetBudgets replaces the budgets. Every span is judged against them from
// its very first occurrence, exact names and globs alike: the kernel
// matches a new name against the globs itself (bpf_loop, 5.17+). With the
// compat core (no bpf_loop) the collector writes an exact budget for each
// name a glob matches, as it first reads the name's series: the spans of
// a new name before that read are judged against exact budgets only.
// Counts are kept.
func (c *Collector) SetBudgets(rules []BudgetRule) error {
	t, err := compileBudgets(rules)
	if err != nil {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return ErrClosed
	}
	old := c.reader.budgets
	for id, b := range t.exact {
		v := bpf.SpanwatchBudget{BudgetNs: uint64(b.rule.Budget), Flags: b.flags}
		if err := c.objs.Budgets.Update(id, &v, ebpf.UpdateAny); err != nil {
			return fmt.Errorf("set budget of %q: %w", b.rule.Span, err)
		}
	}
	if c.reader.compat {
		// The names the old globs gave a budget: matched again below.
		for id := range c.reader.globExact {
			if _, exact := t.exact[id]; !exact {
				if err := c.objs.Budgets.Delete(id); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
					return fmt.Errorf("delete budget of %q: %w", c.reader.names[id], err)
				}
			}
			delete(c.reader.globExact, id)
		}
	}
	if old != nil {
		for id := range old.exact {
			if _, keep := t.exact[id]; !keep {
				if err := c.objs.Budgets.Delete(id); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
					return fmt.Errorf("delete budget of %q: %w", old.exact[id].rule.Span, err)
				}
			}
		}
	}
	for i, b := range t.globs {
		kinds, lits, neg := b.glob.Tokens()
		var g bpf.SpanwatchBudgetGlob
		g.B = bpf.SpanwatchBudget{BudgetNs: uint64(b.rule.Budget), Flags: b.flags}
		g.Len = uint8(len(kinds))
		if neg {
			g.Neg = 1
		}
		copy(g.Kind[:], kinds)
		copy(g.Lit[:], lits)
		if err := c.objs.BudgetGlobs.Update(uint32(i), &g, ebpf.UpdateAny); err != nil {
			return fmt.Errorf("set budget of %q: %w", b.rule.Span, err)
		}
	}
	atomic.StoreUint32(&c.reader.core.GlobCount, uint32(len(t.globs)))
	c.reader.budgets = t
	c.reader.budgetGen++
	if c.reader.compat {
		for _, st := range c.reader.order {
			if !st.dead {
				c.reader.globBudget(st.key.NameId, st.name)
			}
		}
		c.reader.globWrote = false
	}
	c.reader.bumpBudgetGen()
	return nil
}

// bumpBudgetGen makes every series look its budget up again at its next
// span. The generation is kept in 12 bits in each series' cache, where 0
// is a fresh slot's: 0 is skipped.
func (r *seriesReader) bumpBudgetGen() {
	g := atomic.LoadUint32(&r.core.BudgetGen) + 1
	if g&budgetGenMask == 0 {
		g++
	}
	atomic.StoreUint32(&r.core.BudgetGen, g)
}

// globBudget gives a name the budget of the first glob that matches it,
// as an exact entry of the kernel's budgets, for the compat core, which
// matches no globs itself; a name with an exact budget keeps it. The
// caller bumps the generation (globWrote says a read must).
func (r *seriesReader) globBudget(id uint64, name string) {
	if r.budgets == nil || len(r.budgets.globs) == 0 || r.globExact[id] != nil {
		return
	}
	if _, exact := r.budgets.exact[id]; exact {
		return
	}
	b := r.budgets.lookup(name)
	if b == nil {
		return
	}
	v := bpf.SpanwatchBudget{BudgetNs: uint64(b.rule.Budget), Flags: b.flags}
	if err := r.objs.Budgets.Update(id, &v, ebpf.UpdateAny); err != nil {
		r.log.Warn("glob_budget_failed", "span", name, "budget", b.rule.Span, "error", err,
			"effect", "its spans are not judged against the glob's budget")
		return
	}
	r.globExact[id] = b
	r.globWrote = true
}

// budgetOf returns the budget the kernel applies to a name, in ns.
func (r *seriesReader) budgetOf(name string) uint64 {
	if b := r.budgets.lookup(name); b != nil {
		return uint64(b.rule.Budget)
	}
	return 0
}
