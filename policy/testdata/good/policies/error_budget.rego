# Fires when a span's error ratio eats its error budget: the budgets come
# from data.thresholds, per span, with a default.
package spanwatch

default_budget := data.thresholds.default_error_budget

budget(span) := b if {
	b := data.thresholds.error_budget[span]
} else := default_budget

alerts contains a if {
	some s in input.series
	s.count >= data.thresholds.min_count
	s.error_ratio > budget(s.span)
	a := {
		"labels": object.union(s.labels, {"alertname": "ErrorBudgetBurn", "severity": "page"}),
		"annotations": {
			"summary": sprintf("%s error ratio %v%% is over its %v%% budget", [s.span, s.error_ratio * 100, budget(s.span) * 100]),
		},
	}
}
