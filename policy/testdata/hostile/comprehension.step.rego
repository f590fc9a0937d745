# a comprehension a step at a time (a step at a time): unbounded, allocates 1 to a few GB.
package spanwatch

alerts contains {"labels": {"alertname": "Hostile"}} if {
	some s in input.series
	r := [z | some x in numbers.range(1, 10000); some y in numbers.range(1, 2000); z := x * y]
	count(r) > 0
}
