//go:build linux

package collector

import "testing"

func TestCouldExtend(t *testing.T) {
	for _, tc := range []struct {
		pattern, name string
		want          bool
	}{
		{"GET /orders/*", "GET", true},
		{"GET /orders/{id}", "GET", true}, // an exact name extending GET
		{"GET*", "GET", true},
		{"G*", "GET", true},
		{"*", "GET", true},
		{"GET", "GET", false}, // the same name: no extension
		{"GETTER *", "GET", false},
		{"POST /orders/*", "GET", false},
		{"db.query", "db", false},
		{"!GET*", "GET", false}, // negated: not taken
		{"GE? /x", "GET", true},
	} {
		if got := couldExtend(tc.pattern, tc.name); got != tc.want {
			t.Errorf("couldExtend(%q, %q) = %v, want %v", tc.pattern, tc.name, got, tc.want)
		}
	}
}
