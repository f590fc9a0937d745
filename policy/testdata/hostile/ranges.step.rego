# ranges kept a step at a time (a step at a time): unbounded, allocates 1 to a few GB.
package spanwatch

alerts contains {"labels": {"alertname": "Hostile"}} if {
	some s in input.series
	r := [y | some _ in numbers.range(1, 1000); y := numbers.range(1, 10000)]
	count(r) > 0
}
