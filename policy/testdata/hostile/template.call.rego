# a template's nested ranges (one builtin call): unbounded, allocates 1 to a few GB.
package spanwatch

alerts contains {"labels": {"alertname": "Hostile"}} if {
	some s in input.series
	a := [s.span | some _ in numbers.range(1, 1000)]
	count(strings.render_template("{{range $.a}}{{range $.a}}{{.}}{{end}}{{end}}", {"a": a})) > 0
}
