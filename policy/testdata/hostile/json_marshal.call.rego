# json.marshal of shared arrays (one builtin call): unbounded, allocates 1 to a few GB.
package spanwatch

alerts contains {"labels": {"alertname": "Hostile"}} if {
	some s in input.series
	a := [s.span | some _ in numbers.range(1, 1000)]
	b := [a | some _ in numbers.range(1, 1000)]
	count(json.marshal(b)) > 0
}
