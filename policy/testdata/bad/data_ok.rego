package spanwatch

alerts contains {"labels": {"alertname": "X"}} if {
	count(input.series) > data.limit
}
