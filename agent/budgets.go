package agent

import (
	"errors"
	"fmt"

	"github.com/spanwatch/spanwatch/collector"
	"github.com/spanwatch/spanwatch/internal/tpsource"
	"github.com/spanwatch/spanwatch/internal/usdt"
	"github.com/spanwatch/spanwatch/policy"
)

// budgetRules turns the rule file's budgets into the collector's, in file
// order (exact names win over globs; among globs the first wins).
func budgetRules(rules *policy.Config) []collector.BudgetRule {
	out := make([]collector.BudgetRule, 0, len(rules.Budgets))
	for _, b := range rules.Budgets {
		out = append(out, collector.BudgetRule{Span: b.Span.String(), Budget: b.Budget, NoUserStack: !b.CaptureStack, KernelStack: b.KernelStack})
	}
	return out
}

// checkBudgets reports the budgets the kernel would refuse, at their
// positions in the file: the collector's own validation (SetBudgets runs
// the same), so that check and run agree.
func checkBudgets(ec *errorCollector, rules *policy.Config) {
	for _, err := range collector.CheckBudgets(budgetRules(rules)) {
		var be *collector.BudgetError
		if errors.As(err, &be) && be.Index >= 0 && be.Index < len(rules.Budgets) {
			p := rules.Budgets[be.Index].Pos
			ec.errs = append(ec.errs, &Error{File: p.File, Line: p.Line, Col: p.Col, Msg: be.Error()})
			continue
		}
		ec.add(err)
	}
}

// checkSourceLimits reports sources past what the kernel's maps hold: the
// USDT tracer's sources (its usdt_sources map, which Tracer.Add checks),
// the tracepoint sources (collector.CheckTracepointSources, which
// AttachTracepoints calls) and the label sets of sources with labels
// (collector.AllocLabelSet's).
func checkSourceLimits(ec *errorCollector, srcs []usdt.SpanSource, tps []tpsource.Source) {
	if max := usdt.MaxSources(); len(srcs) > max {
		ec.add(fmt.Errorf("%s: more than %d USDT sources: the kernel holds %d", srcs[max].Pos, max, max))
	}
	for _, err := range collector.CheckTracepointSources(tps) {
		ec.add(err)
	}
	labeled := 0
	for i := range srcs {
		if len(srcs[i].Labels.List) == 0 {
			continue
		}
		if labeled++; labeled == collector.MaxLabelSets+1 {
			ec.add(fmt.Errorf("%s: more than %d sources with labels: the kernel holds %d label sets", srcs[i].Pos, collector.MaxLabelSets, collector.MaxLabelSets))
		}
	}
	for i := range tps {
		if len(tps[i].Labels.List) == 0 {
			continue
		}
		if labeled++; labeled == collector.MaxLabelSets+1 {
			ec.add(fmt.Errorf("%s: more than %d sources with labels: the kernel holds %d label sets", tps[i].Pos, collector.MaxLabelSets, collector.MaxLabelSets))
		}
	}
}
