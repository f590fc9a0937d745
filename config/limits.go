package config

import (
	"errors"
	"fmt"
	"strings"

	"github.com/spanwatch/spanwatch/source/tracepoint"

	"github.com/spanwatch/spanwatch/collector"
	"github.com/spanwatch/spanwatch/config/section"
	"github.com/spanwatch/spanwatch/internal/srcspec"
	"github.com/spanwatch/spanwatch/internal/tpsource"
	"github.com/spanwatch/spanwatch/internal/usdt"
	"github.com/spanwatch/spanwatch/policy"
)

// BudgetRules turns the rules' budgets into the collector's, in file order
// (exact names win over globs; among globs the first wins): what the
// agent writes into the kernel, and what Load checks against the kernel's
// limits.
func BudgetRules(rules *policy.Config) []collector.BudgetRule {
	out := make([]collector.BudgetRule, 0, len(rules.Budgets))
	for _, b := range rules.Budgets {
		out = append(out, collector.BudgetRule{Span: b.Span.String(), Budget: b.Budget, NoUserStack: !b.CaptureStack, KernelStack: b.KernelStack, SampleFromStart: b.SampleFromStart})
	}
	return out
}

// checkBudgets reports the budgets the kernel would refuse, at their
// positions in the file: the collector's own validation (SetBudgets runs
// the same), so that check and run agree.
func checkBudgets(d *section.Decoder, rules *policy.Config) {
	for _, err := range collector.CheckBudgets(BudgetRules(rules)) {
		var be *collector.BudgetError
		if errors.As(err, &be) && be.Index >= 0 && be.Index < len(rules.Budgets) {
			p := rules.Budgets[be.Index].Pos
			d.Add(&section.Error{File: p.File, Line: p.Line, Col: p.Col, Msg: be.Error()})
			continue
		}
		d.Add(err)
	}
}

// checkSourceLimits reports sources past what the kernel's maps hold: the
// USDT tracer's sources (its usdt_sources map, which Tracer.Add checks),
// the tracepoint sources (tracepoint.CheckTracepointSources, which
// tracepoint.Attach calls) and the label sets of sources with labels
// (collector.AllocLabelSet's).
func checkSourceLimits(d *section.Decoder, srcs []usdt.SpanSource, tps []tpsource.Source) {
	at := func(p section.Pos, format string, a ...any) {
		d.Add(&section.Error{File: p.File, Line: p.Line, Col: p.Col, Msg: fmt.Sprintf(format, a...)})
	}
	if max := usdt.MaxSources(); len(srcs) > max {
		at(srcs[max].Pos, "more than %d USDT sources: the kernel holds %d", max, max)
	}
	for _, err := range tracepoint.CheckTracepointSources(tps) {
		d.Add(err)
	}
	labeled := 0
	for i := range srcs {
		if len(srcs[i].Labels.List) == 0 {
			continue
		}
		if labeled++; labeled == collector.MaxLabelSets+1 {
			at(srcs[i].Pos, "more than %d sources with labels: the kernel holds %d label sets", collector.MaxLabelSets, collector.MaxLabelSets)
		}
	}
	for i := range tps {
		if len(tps[i].Labels.List) == 0 {
			continue
		}
		if labeled++; labeled == collector.MaxLabelSets+1 {
			at(tps[i].Pos, "more than %d sources with labels: the kernel holds %d label sets", collector.MaxLabelSets, collector.MaxLabelSets)
		}
	}
}

func joinKeys(keys []string) string { return strings.Join(keys, ", ") }

// didYouMean is a hint naming the key nearest a mistyped one, or "".
func didYouMean(key string, keys []string) string {
	if near := srcspec.Nearest(key, keys); near != "" {
		return fmt.Sprintf(": did you mean %s?", near)
	}
	return ""
}
