package policy

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/spanwatch/spanwatch/snapshot"
)

// FuzzParse feeds arbitrary bytes to the rule file loader: it must never
// panic and must answer quickly, whatever the input (alias bombs and deep
// nesting included). Policy files are not read: the fuzzer's paths point
// nowhere, which exercises the missing-file errors instead.
func FuzzParse(f *testing.F) {
	for _, dir := range []string{"testdata/good", "testdata/bad"} {
		files, _ := filepath.Glob(filepath.Join(dir, "*.yaml"))
		for _, name := range files {
			data, err := os.ReadFile(name)
			if err != nil {
				f.Fatal(err)
			}
			f.Add(data)
		}
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		start := time.Now()
		cfg, err := Parse("fuzz.yaml", data, Options{Dir: t.TempDir()})
		if el := time.Since(start); el > 10*time.Second { // a hang, not a speed figure
			t.Fatalf("Parse took %v", el)
		}
		if err == nil && cfg == nil {
			t.Fatal("nil config without an error")
		}
		if err != nil && err.Error() == "" {
			t.Fatal("empty error message")
		}
	})
}

// FuzzCondition checks the condition parser never panics, and that what it
// accepts evaluates without NaN on an empty and a busy series.
func FuzzCondition(f *testing.F) {
	for _, s := range []string{"p99 > 200ms", "error_ratio >= 5% and count > 100", "rate < 10/m", "max == 0", "p50<=1.5s&&errors!=3", "count > 1e308", "p99 > 9999999h"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		c, err := ParseCondition(s)
		if err != nil {
			return
		}
		for _, ser := range []*snapshot.Series{{}, testSeries()} {
			v, _ := c.Holds(ser)
			if v != v {
				t.Fatalf("%q: NaN value", s)
			}
		}
	})
}

// FuzzGlob checks glob compilation and matching never panic, and that a
// pattern without metacharacters matches exactly itself.
func FuzzGlob(f *testing.F) {
	for _, s := range [][2]string{{"db.*", "db.query"}, {"!a?c", "abc"}, {`a\*`, "a*"}, {"*a*a*a*b", "aaaaaaaaaaaaaaaaaaaa"}, {"é?", "éé"}} {
		f.Add(s[0], s[1])
	}
	f.Fuzz(func(t *testing.T, pattern, s string) {
		g, err := CompileGlob(pattern)
		if err != nil {
			return
		}
		got := g.Match(s)
		if !strings.ContainsAny(pattern, `*?\!`) && got != (pattern == s) {
			t.Fatalf("literal %q on %q: %v", pattern, s, got)
		}
	})
}
