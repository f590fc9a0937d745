package spanwatch

alerts contains {"labels": {"alertname": "Errors", "span": s.span}} if {
	some s in input.series
	s.error_ratio > 0.5
}
