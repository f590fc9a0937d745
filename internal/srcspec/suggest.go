package srcspec

import "strings"

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
		if d := editDistance(n, norm(c)); d < bestD {
			best, bestD = c, d
		}
	}
	return best
}

// editDistance is the Levenshtein distance of two strings, by bytes.
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}
