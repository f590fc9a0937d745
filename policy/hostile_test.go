package policy

import (
	"strings"
	"testing"
	"time"
)

// TestHostileYAML checks that inputs built to exhaust a parser fail, without
// blowing up, with an error that says what is wrong.
func TestHostileYAML(t *testing.T) {
	bomb := "a: &a [x,x,x,x,x,x,x,x,x,x]\n"
	prev := "a"
	for _, n := range []string{"b", "c", "d", "e", "f", "g", "h", "i", "j"} {
		bomb += n + ": &" + n + " [" + strings.Repeat("*"+prev+",", 10) + "]\n"
		prev = n
	}
	for _, tc := range []struct {
		name, src, want string
	}{
		{"alias bomb 10^10", bomb, "alias bomb"},
		{"self-referencing alias", "a: &a [" + strings.Repeat("*a,", 1000) + "]", "nested deeper than 64 levels"},
		{"500k open brackets", "rules: " + strings.Repeat("[", 500000), "exceeded max depth"},
		{"100k nested lists", strings.Repeat("- ", 100000) + "x", "exceeded max depth"},
		{"100k nested maps", strings.Repeat("{a: ", 100000), "exceeded max depth"},
		{"300 KB with a syntax error at the end", "rules:\n" + strings.Repeat("  - name: X\n    when: p99 > 1s\n", 10000) + "   labels: {a: b}\n", "did not find expected '-' indicator"},
		{"65 nested lists", "rules: " + strings.Repeat("[", 65) + strings.Repeat("]", 65), "nested deeper than 64 levels"},
	} {
		start := time.Now()
		_, err := Parse("x.yaml", []byte(tc.src), Options{})
		el := time.Since(start)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: err = %.200v, want %q", tc.name, err, tc.want)
		}
		// A bound against blow-ups (exponential expansion, quadratic
		// re-parsing), not a speed figure: generous for -race and busy
		// machines.
		if el > 10*time.Second {
			t.Errorf("%s: took %v", tc.name, el)
		}
	}
}
