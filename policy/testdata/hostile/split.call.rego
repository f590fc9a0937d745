# split into runes (one builtin call): unbounded, allocates 1 to a few GB.
package spanwatch

alerts contains {"labels": {"alertname": "Hostile"}} if {
	some s in input.series
	kb := concat("", [s.span | some _ in numbers.range(1, 10)])
	mb := concat("", [kb | some _ in numbers.range(1, 5000)])
	count(split(mb, "")) > 0
}
