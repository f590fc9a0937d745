package glob

import (
	"strings"
	"testing"
)

func TestMatch(t *testing.T) {
	for _, tc := range []struct {
		pattern, s string
		want       bool
	}{
		{"checkout", "checkout", true},
		{"checkout", "checkout2", false},
		{"check*", "checkout", true},
		{"*", "", true},
		{"*", "anything/at/all", true},
		{"/kubepods*", "/kubepods.slice/kubepods-pod1.slice", true}, // '*' crosses '/', unlike path.Match
		{"GET /api/*/items", "GET /api/v1/items", true},
		{"GET [id]", "GET [id]", true}, // no character classes, unlike path.Match
		{"[ab]", "a", false},
		{"a?c", "aéc", true},
		{"a?c", "ac", false},
		{`a\*c`, "a*c", true},
		{`a\*c`, "abc", false},
		{`\!x`, "!x", true},
		{"!istio-proxy", "istio-proxy", false},
		{"!istio-proxy", "server", true},
		{"*a*a*a*a*a*b", strings.Repeat("a", 10000), false},
	} {
		g, err := Compile(tc.pattern)
		if err != nil {
			t.Fatalf("Compile(%q): %v", tc.pattern, err)
		}
		if got := g.Match(tc.s); got != tc.want {
			t.Errorf("%q.Match(%q) = %v, want %v", tc.pattern, tc.s, got, tc.want)
		}
	}
	if _, err := Compile(`a\`); err == nil {
		t.Error(`Compile("a\\") succeeded`)
	}
	for _, tc := range []struct {
		pattern string
		exact   string
		ok      bool
	}{{"checkout", "checkout", true}, {`a\*`, "a*", true}, {"a*", "", false}, {"!a", "", false}} {
		g, _ := Compile(tc.pattern)
		if s, ok := g.Exact(); s != tc.exact && tc.ok || ok != tc.ok {
			t.Errorf("%q.Exact() = %q, %v; want %q, %v", tc.pattern, s, ok, tc.exact, tc.ok)
		}
	}
}
