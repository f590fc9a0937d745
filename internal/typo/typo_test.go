package typo

import "testing"

func TestDistance(t *testing.T) {
	for _, tc := range []struct {
		a, b string
		want int
	}{
		{"", "", 0},
		{"", "abc", 3},
		{"abc", "", 3},
		{"interval", "intervall", 1},
		{"kitten", "sitting", 3},
		{"duraton_field", "duration_field", 1},
		{"p99", "p90", 1},
		{"flaw", "lawn", 2},
	} {
		if got := Distance(tc.a, tc.b); got != tc.want {
			t.Errorf("Distance(%q, %q) = %d, want %d", tc.a, tc.b, got, tc.want)
		}
		if got := Distance(tc.b, tc.a); got != tc.want {
			t.Errorf("Distance(%q, %q) = %d, want %d (symmetric)", tc.b, tc.a, got, tc.want)
		}
	}
}

func TestNearest(t *testing.T) {
	keys := []string{"usdt", "user_events", "eventheader"}
	for _, tc := range []struct {
		name string
		max  int
		want string
	}{
		{"usdtt", 2, "usdt"},
		{"user_event", 2, "user_events"},
		{"kprobes", 2, ""},
		{"usdt", 0, "usdt"},
		{"usd", 0, ""},
	} {
		if got := Nearest(tc.name, keys, tc.max); got != tc.want {
			t.Errorf("Nearest(%q, %d) = %q, want %q", tc.name, tc.max, got, tc.want)
		}
	}
	// A tie goes to the first candidate.
	if got := Nearest("ab", []string{"ax", "xb"}, 1); got != "ax" {
		t.Errorf("tie: %q, want ax", got)
	}
}
