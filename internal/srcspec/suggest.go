package srcspec

import (
	"strings"

	"github.com/spanwatch/spanwatch/internal/typo"
)

// Nearest returns the candidate closest to name, for "did you mean"
// hints: one that differs only in "__" against "_" (USDT probe names are
// written with "__" in C and appear with "_" in some tools' output, and
// the other way round) or in letter case, else the one within a small edit
// distance (a third of the name's length, at least 2). "" when none is
// close, or name is a candidate.
func Nearest(name string, candidates []string) string {
	norm := func(s string) string {
		return strings.ToLower(strings.ReplaceAll(s, "__", "_"))
	}
	n := norm(name)
	for _, c := range candidates {
		if c == name {
			return ""
		}
	}
	for _, c := range candidates {
		if c != name && norm(c) == n {
			return c
		}
	}
	best, bestD := "", max(2, len(name)/3)+1
	for _, c := range candidates {
		if c == name {
			continue
		}
		if d := typo.Distance(n, norm(c)); d < bestD {
			best, bestD = c, d
		}
	}
	return best
}
