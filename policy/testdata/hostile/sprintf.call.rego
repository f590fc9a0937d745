# sprintf widths (one builtin call): unbounded, allocates 1 to a few GB.
package spanwatch

alerts contains {"labels": {"alertname": "Hostile"}} if {
	some s in input.series
	f := concat("", ["%1000000d" | some _ in numbers.range(1, 1500)])
	count(sprintf(f, [1 | some _ in numbers.range(1, 1500)])) > 0
}
