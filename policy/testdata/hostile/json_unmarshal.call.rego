# json.unmarshal of a long list (one builtin call): unbounded, allocates 1 to a few GB.
package spanwatch

alerts contains {"labels": {"alertname": "Hostile"}} if {
	some s in input.series
	k := concat(",", ["0" | some _ in numbers.range(1, 1000)])
	m := concat(",", [k | some _ in numbers.range(1, 2000)])
	count(json.unmarshal(concat("", ["[", m, "]"]))) > 0
}
