//go:build linux

package collector

import (
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"time"

	"github.com/cilium/ebpf"

	"github.com/spanwatch/spanwatch/bpf"
)

// The kernel keeps two sets of budgets (budgets and budget_globs hold
// both) and one word that says which is in force (core_state.budget_gen:
// the generation, the set and its glob count). A change writes the set
// not in force, where no span looks, then switches with one store of the
// word: a span is judged by the old budgets or the new, never a mix, and
// a change that fails half way leaves the budgets in force untouched.
//
// The compat core (kernels 5.10 to 5.16, no bpf_loop) matches no globs:
// the collector gives each name a glob matches an exact entry in the set
// in force, as it first reads the name's series (globBudget), and a change
// writes those of every live series into the set it prepares, so that
// they come in force with it.
const (
	budgetSetShift   = uint32(bpf.SpanwatchBudgetBitsBUDGET_SET_SHIFT)
	budgetGlobsShift = uint32(bpf.SpanwatchBudgetBitsBUDGET_GLOBS_SHIFT)
)

// budgetSet is what the collector wrote into one set of the kernel's
// budgets: every name id that may be there (after a failed write, a
// superset; the compat core's names given a glob's budget included), and
// how many glob entries.
type budgetSet struct {
	ids   map[uint64]bool
	globs int
}

// A BudgetChange is a new set of budgets written into the kernel but not
// in force yet: Commit puts it in force at once, Abort drops it. Only one
// change is prepared at a time: a second PrepareBudgets waits for the
// first's Commit or Abort.
type BudgetChange struct {
	c   *Collector
	t   *budgetTable
	set uint32
	// globExact is, for the compat core, the names given a glob's
	// budget in set.
	globExact map[uint64]*compiledBudget
	done      bool
}

// SetBudgets replaces the budgets, all at once: PrepareBudgets, then
// Commit. Every span is judged against them from its very first
// occurrence, exact names and globs alike: the kernel matches a new name
// against the globs itself (bpf_loop, 5.17+). With the compat core (no
// bpf_loop) the collector writes an exact budget for each name a glob
// matches, as it first reads the name's series: the spans of a new name
// before that read are judged against exact budgets only. Counts are
// kept. On error the budgets in force are unchanged.
func (c *Collector) SetBudgets(rules []BudgetRule) error {
	ch, err := c.PrepareBudgets(rules)
	if err != nil {
		return err
	}
	return ch.Commit()
}

// PrepareBudgets validates rules (as CheckBudgets) and writes them into
// the kernel's set of budgets that is not in force; nothing changes for
// the spans until Commit. On error nothing is in force that was not
// before, and no change is left prepared.
func (c *Collector) PrepareBudgets(rules []BudgetRule) (*BudgetChange, error) {
	t, errs := compileBudgets(rules)
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	c.budgetMu.Lock()
	ok := false
	defer func() {
		if !ok {
			c.budgetMu.Unlock()
		}
	}()
	c.mu.Lock()
	closed := c.closed
	c.mu.Unlock()
	if closed {
		return nil, ErrClosed
	}
	word := atomic.LoadUint32(&c.reader.core.BudgetGen)
	set := (word>>budgetSetShift)&1 ^ 1
	if err := c.writeBudgetSet(set, t); err != nil {
		return nil, err
	}
	ch := &BudgetChange{c: c, t: t, set: set}
	if c.reader.compat {
		ch.globExact = map[uint64]*compiledBudget{}
		c.mu.Lock()
		err := c.reader.globBudgets(ch)
		c.mu.Unlock()
		if err != nil {
			return nil, err
		}
	}
	ok = true
	return ch, nil
}

// writeBudgetSet makes set hold t: what it held and t does not is deleted
// first (the map holds two sets of MaxExactBudgets), then t is written.
func (c *Collector) writeBudgetSet(set uint32, t *budgetTable) error {
	s := &c.budgetSets[set]
	if s.ids == nil {
		s.ids = map[uint64]bool{}
	}
	for id := range s.ids {
		if _, keep := t.exact[id]; keep {
			continue
		}
		k := bpf.SpanwatchBudgetKey{NameId: id, Set: set}
		if err := c.objs.Budgets.Delete(&k); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
			return fmt.Errorf("clear unused budget set: %w", err)
		}
		delete(s.ids, id)
	}
	if budgetWriteHook != nil {
		if err := budgetWriteHook(); err != nil {
			return err
		}
	}
	for id, b := range t.exact {
		s.ids[id] = true // before the write: a failed write may have landed
		k := bpf.SpanwatchBudgetKey{NameId: id, Set: set}
		v := bpf.SpanwatchBudget{BudgetNs: uint64(b.rule.Budget), Flags: b.flags}
		if err := c.objs.Budgets.Update(&k, &v, ebpf.UpdateAny); err != nil {
			return fmt.Errorf("set budget of %q: %w", b.rule.Span, err)
		}
		if budgetWriteHook != nil {
			if err := budgetWriteHook(); err != nil {
				return err
			}
		}
	}
	base := set * uint32(MaxGlobBudgets)
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
		if err := c.objs.BudgetGlobs.Update(base+uint32(i), &g, ebpf.UpdateAny); err != nil {
			return fmt.Errorf("set budget of %q: %w", b.rule.Span, err)
		}
	}
	s.globs = len(t.globs)
	return nil
}

// budgetWriteHook, when set (by tests), runs between the writes of a
// budget set and fails the write when it returns an error: a change that
// fails half way.
var budgetWriteHook func() error

// Commit puts the prepared budgets in force, for every span at once: one
// store of the word the kernel reads. Every series looks its budget up
// again at its next span.
func (ch *BudgetChange) Commit() error {
	if ch.done {
		return errors.New("budget change already committed or aborted")
	}
	ch.done = true
	c := ch.c
	defer c.budgetMu.Unlock()
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return ErrClosed
	}
	if c.reader.compat {
		// The names first read since PrepareBudgets: their glob
		// budgets, into the set about to be in force. A write refused
		// here leaves the name unjudged (logged), not the change half
		// made.
		if err := c.reader.globBudgets(ch); err != nil {
			c.log.Warn("glob_budget_failed", "error", err, "effect", "the spans of names first seen during the change are not judged against a glob's budget")
		}
		c.reader.globExact = ch.globExact
		c.reader.globWrote = false
	}
	word := atomic.LoadUint32(&c.reader.core.BudgetGen)
	atomic.StoreUint32(&c.reader.core.BudgetGen, nextBudgetGen(word)|ch.set<<budgetSetShift|uint32(len(ch.t.globs))<<budgetGlobsShift)
	c.reader.budgets = ch.t
	c.reader.budgetGen++
	in := c.inflight
	c.mu.Unlock()
	// Outside c.mu: a scan holds the watcher's lock and takes c.mu.
	c.applyEarly(in, ch.t)
	return nil
}

// Abort drops a prepared change: the budgets in force stay.
func (ch *BudgetChange) Abort() {
	if ch.done {
		return
	}
	ch.done = true
	ch.c.budgetMu.Unlock()
}

// nextBudgetGen is the generation after word's. It is kept in 12 bits in
// each series' cache, where 0 is a fresh slot's: 0 is skipped.
func nextBudgetGen(word uint32) uint32 {
	gen := (word + 1) & budgetGenMask
	if gen == 0 {
		gen = 1
	}
	return gen
}

// bumpBudgetGen makes every series look its budget up again at its next
// span, the same budgets in force (the compat core's glob budgets were
// added to them).
func (r *seriesReader) bumpBudgetGen() {
	word := atomic.LoadUint32(&r.core.BudgetGen)
	atomic.StoreUint32(&r.core.BudgetGen, word&^budgetGenMask|nextBudgetGen(word))
}

// globBudgets writes, for the compat core, the exact budget of each live
// series' name that ch's globs give one (and ch's exact names do not)
// into ch's set, which is not in force yet. The caller holds c.mu.
func (r *seriesReader) globBudgets(ch *BudgetChange) error {
	if len(ch.t.globs) == 0 {
		return nil
	}
	ids := &r.sets[ch.set]
	for _, st := range r.order {
		id := st.key.NameId
		if st.dead || ch.globExact[id] != nil {
			continue
		}
		if _, exact := ch.t.exact[id]; exact {
			continue
		}
		b := ch.t.lookup(st.name)
		if b == nil {
			continue
		}
		ids.ids[id] = true // before the write: a failed write may have landed
		k := bpf.SpanwatchBudgetKey{NameId: id, Set: ch.set}
		v := bpf.SpanwatchBudget{BudgetNs: uint64(b.rule.Budget), Flags: b.flags}
		if err := r.objs.Budgets.Update(&k, &v, ebpf.UpdateAny); err != nil {
			return fmt.Errorf("set the budget of %q from %q: %w", st.name, b.rule.Span, err)
		}
		ch.globExact[id] = b
	}
	return nil
}

// globBudget gives a name the budget of the first glob that matches it,
// as an exact entry of the set of budgets in force, for the compat core,
// which matches no globs itself; a name with an exact budget keeps it.
// The caller bumps the generation (globWrote says a read must) and holds
// c.mu, as Commit does when it changes the set in force.
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
	set := atomic.LoadUint32(&r.core.BudgetGen) >> budgetSetShift & 1
	r.sets[set].ids[id] = true // before the write: a failed write may have landed
	k := bpf.SpanwatchBudgetKey{NameId: id, Set: set}
	v := bpf.SpanwatchBudget{BudgetNs: uint64(b.rule.Budget), Flags: b.flags}
	if err := r.objs.Budgets.Update(&k, &v, ebpf.UpdateAny); err != nil {
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

// BudgetsInForce reads the budgets the kernel applies now from its maps
// (not from the collector's copy): the exact names' budgets by name id,
// and the glob patterns with their budgets, in order. For tests and
// diagnostics: it walks the whole budgets map.
func (c *Collector) BudgetsInForce() (exact map[uint64]time.Duration, globs []BudgetRule, err error) {
	word := atomic.LoadUint32(&c.reader.core.BudgetGen)
	set := word >> budgetSetShift & 1
	n := int(word >> budgetGlobsShift & uint32(bpf.SpanwatchBudgetBitsBUDGET_GLOBS_MASK))
	exact = map[uint64]time.Duration{}
	var (
		k bpf.SpanwatchBudgetKey
		v bpf.SpanwatchBudget
	)
	it := c.objs.Budgets.Iterate()
	for it.Next(&k, &v) {
		if k.Set == set {
			exact[k.NameId] = time.Duration(v.BudgetNs)
		}
	}
	if err := it.Err(); err != nil {
		return nil, nil, fmt.Errorf("read budgets: %w", err)
	}
	for i := 0; i < n; i++ {
		var g bpf.SpanwatchBudgetGlob
		if err := c.objs.BudgetGlobs.Lookup(set*uint32(MaxGlobBudgets)+uint32(i), &g); err != nil {
			return nil, nil, fmt.Errorf("read glob budget %d: %w", i, err)
		}
		var b strings.Builder
		if g.Neg != 0 {
			b.WriteByte('!')
		}
		for j := 0; j < int(g.Len) && j < len(g.Kind); j++ {
			switch g.Kind[j] {
			case 1:
				b.WriteByte('*')
			case 2:
				b.WriteByte('?')
			default:
				if g.Lit[j] == '*' || g.Lit[j] == '?' || g.Lit[j] == '\\' {
					b.WriteByte('\\')
				}
				b.WriteByte(g.Lit[j])
			}
		}
		globs = append(globs, BudgetRule{Span: b.String(), Budget: time.Duration(g.B.BudgetNs),
			NoUserStack: g.B.Flags&captureUser == 0, KernelStack: g.B.Flags&captureKernl != 0})
	}
	return exact, globs, nil
}
