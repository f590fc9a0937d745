package policy_test

import "testing/fstest"

var exampleFS = fstest.MapFS{
	"slow.rego": {Data: []byte(`package spanwatch

alerts contains {"labels": {"alertname": "VerySlow", "span": s.span}} if {
	some s in input.series
	s.p99_ns > 1000000000
}
`)},
}
