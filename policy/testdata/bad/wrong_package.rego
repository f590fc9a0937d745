package myrules

alerts contains {"labels": {"alertname": "X"}} if {
	count(input.series) > 0
}
