package spanwatch

alerts contains a if {
	some s in input.series
	a := {"labels": {"alertname": "X"}
}
