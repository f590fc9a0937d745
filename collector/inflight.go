//go:build linux

package collector

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/cilium/ebpf"

	"github.com/spanwatch/spanwatch/internal/inflight"
	"github.com/spanwatch/spanwatch/internal/kernel"
)

// InflightConfig configures the sampling of spans while they run past their
// budget (internal/inflight): the SDKs' spans, which send a start event,
// and USDT spans with a start probe. The zero value samples.
type InflightConfig struct {
	// Off turns in-span sampling off: overruns then carry only the stack
	// where the span ended, and a span that never ends is not reported.
	Off bool
	// Interval is how often open spans are scanned (100ms when zero): a
	// span is sampled from about Interval after its budget on.
	Interval time.Duration
	// Samples bounds the samples of one thread or goroutine while its
	// spans are over budget (100 when zero); Frequency is the on-CPU
	// sampling rate (99 Hz when zero).
	Samples   int
	Frequency uint64
}

// inflightState is the collector's in-span sampling: the watcher and the
// smallest budget of the rules, for the watcher's scans.
type inflightState struct {
	w *inflight.Watcher
}

// startInflight starts the watcher of open spans. Where it cannot load
// (kernels before 5.9 lack map iterators) overruns keep their end stacks
// only, and it says so.
func (c *Collector) startInflight(ctx context.Context) {
	cfg := c.cfg.Inflight
	if cfg.Off {
		return
	}
	if c.facts.Core == kernel.CoreCompat {
		// The samplers need bpf_copy_from_user_task (5.18), bpf_loop and
		// task storage; the kernel line at start says so.
		c.inflightErr = fmt.Errorf("%w: the compat objects have no samplers", ebpf.ErrNotSupported)
		return
	}
	w, err := inflight.New(inflight.Config{
		Logger: c.log, Core: c.objs.Core, Budgets: c.objs.Budgets, Overruns: c.objs.Overruns, Counters: c.objs.Counters,
		Exec: c.objs.InflightExec, GProcs: c.objs.InflightGprocs,
		Budget: c.inflightBudget, MinBudget: c.inflightMinBudget,
		Interval: cfg.Interval, Samples: cfg.Samples, Frequency: cfg.Frequency,
	})
	if err != nil {
		c.inflightErr = err
		c.log.Warn("inflight_sampling_unavailable", "error", err, "effect", "overruns carry only the stack where the span ended; spans that never end are not reported")
		return
	}
	c.mu.Lock()
	c.inflight = &inflightState{w: w}
	t := c.reader.budgets
	c.mu.Unlock()
	c.closers = append(c.closers, w.Close)
	c.applyEarly(c.inflight, t)
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		if err := w.Run(ctx); err != nil && ctx.Err() == nil {
			c.log.Warn("inflight_watch_stopped", "error", err)
		}
	}()
}

// applyEarly has the watcher sample from their start the spans of the
// budgets with SampleFromStart (exact names: compileBudgets refuses
// globs). Without a watcher (in-span sampling off, the compat objects, a
// kernel that refused the samplers) it says that these spans are not.
func (c *Collector) applyEarly(in *inflightState, t *budgetTable) {
	early := map[string]time.Duration{}
	if t != nil {
		for _, b := range t.exact {
			if name, ok := b.glob.Exact(); ok && b.rule.SampleFromStart {
				early[name] = b.rule.Budget
			}
		}
	}
	if in == nil {
		if len(early) == 0 {
			return
		}
		reason := "in-span sampling is off (InflightConfig.Off)"
		if c.inflightErr != nil {
			reason = c.inflightErr.Error()
		}
		c.log.Warn("sample_from_start_unavailable", "spans", len(early), "reason", reason,
			"effect", "no span is sampled from its start; in-span samples begin past the budget, if at all")
		return
	}
	if err := in.w.SetEarly(early); err != nil {
		c.log.Warn("sample_from_start_failed", "error", err, "effect", "the spans of sample_from_start budgets are sampled from their budget on")
	}
}

// inflightBudget is a span's budget as the rules give it, so that a span
// that never ended before is judged by a glob budget too; 0 when its rule
// takes no stacks (NoUserStack). A start name that the span's final name
// may extend (prefix) takes the smallest budget of the rules a name
// extending it could match.
func (c *Collector) inflightBudget(_ uint64, name string, prefix bool) uint64 {
	c.mu.Lock()
	t := c.reader.budgets
	c.mu.Unlock()
	if t == nil {
		return 0
	}
	if b := t.lookup(name); b != nil {
		if b.rule.NoUserStack {
			return 0
		}
		return uint64(b.rule.Budget)
	}
	if !prefix {
		return 0
	}
	var least uint64
	consider := func(b *compiledBudget) {
		if !b.rule.NoUserStack && couldExtend(b.rule.Span, name) && (least == 0 || uint64(b.rule.Budget) < least) {
			least = uint64(b.rule.Budget)
		}
	}
	for _, b := range t.exact {
		consider(b)
	}
	for _, b := range t.globs {
		consider(b)
	}
	return least
}

// couldExtend reports whether pattern (a name or a glob) may match a name
// that extends name as the OpenTelemetry processor's Fold does: name, a
// space, more. A negated glob ("!...") is not taken.
func couldExtend(pattern, name string) bool {
	if strings.HasPrefix(pattern, "!") {
		return false
	}
	lit := pattern
	if i := strings.IndexAny(pattern, "*?\\"); i >= 0 {
		lit = pattern[:i]
	}
	ext := name + " "
	if len(lit) >= len(ext) {
		return strings.HasPrefix(lit, ext)
	}
	// The rest of the name falls in the glob's wildcard part.
	return strings.HasPrefix(ext, lit) && lit != pattern
}

// inflightMinBudget is the smallest budget of the rules that take stacks;
// 0 for none.
func (c *Collector) inflightMinBudget() uint64 {
	c.mu.Lock()
	t := c.reader.budgets
	c.mu.Unlock()
	if t == nil {
		return 0
	}
	var least uint64
	consider := func(b *compiledBudget) {
		if !b.rule.NoUserStack && (least == 0 || uint64(b.rule.Budget) < least) {
			least = uint64(b.rule.Budget)
		}
	}
	for _, b := range t.globs {
		consider(b)
	}
	for _, b := range t.exact {
		consider(b)
	}
	return least
}
