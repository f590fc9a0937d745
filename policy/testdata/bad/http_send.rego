package spanwatch

alerts contains a if {
	resp := http.send({"method": "GET", "url": "https://example.com/thresholds"})
	some s in input.series
	s.p99_ns > resp.body.p99
	a := {"labels": {"alertname": "Slow", "span": s.span}}
}
