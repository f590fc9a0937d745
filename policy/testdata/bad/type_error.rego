package spanwatch

alerts contains {"labels": {"alertname": "X"}} if {
	some s in input.series
	upper(s.count) == "X"
	not_a_function(s)
}
