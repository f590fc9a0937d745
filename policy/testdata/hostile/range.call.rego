# numbers.range over a user's count (one builtin call): unbounded, allocates 1 to a few GB.
package spanwatch

alerts contains {"labels": {"alertname": "Hostile"}} if {
	some s in input.series
	r := numbers.range(1, s.count)
	count(r) > 0
}
