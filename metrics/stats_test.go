package metrics

import (
	"strings"
	"testing"

	"github.com/spanwatch/spanwatch/snapshot"
)

// TestStatFamilies: every number of the snapshot's stats has its family,
// a counter named _total for a count and a gauge for a level, and no
// family is left of a stat that is gone.
func TestStatFamilies(t *testing.T) {
	seen := map[string]bool{}
	for _, f := range snapshot.StatFields {
		fam, ok := statFamilies[f.Name]
		if !ok {
			t.Errorf("stat %s has no family", f.Name)
			continue
		}
		seen[f.Name] = true
		if total := strings.HasSuffix(fam.name, "_total"); total == f.Level {
			t.Errorf("stat %s (level %v) exported as %s", f.Name, f.Level, fam.name)
		}
	}
	for name := range statFamilies {
		if !seen[name] {
			t.Errorf("family of %s, which is not a stat", name)
		}
	}
}
