# replace with an empty pattern (one builtin call): unbounded, allocates 1 to a few GB.
package spanwatch

alerts contains {"labels": {"alertname": "Hostile"}} if {
	some s in input.series
	kb := concat("", [s.span | some _ in numbers.range(1, 10)])
	mb := concat("", [kb | some _ in numbers.range(1, 1000)])
	count(replace(mb, "", kb)) > 0
}
