package tracefs

import "github.com/spanwatch/spanwatch/internal/typo"

// Nearest returns the candidate closest to name by edit distance when it
// is close enough to be a likely typo: at most a third of name's length
// apart (at least 1). It returns "" when none is.
func Nearest(name string, candidates []string) string {
	return typo.Nearest(name, candidates, max(1, len(name)/3))
}
