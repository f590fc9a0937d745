package bpf

import (
	"os"
	"regexp"
	"sort"
	"testing"
)

// TestCoreMapsListed checks CoreMaps against the maps aggregate.h defines.
func TestCoreMapsListed(t *testing.T) {
	src, err := os.ReadFile("aggregate.h")
	if err != nil {
		t.Fatal(err)
	}
	var defined []string
	for _, m := range regexp.MustCompile(`\} (\w+) SEC\("\.maps"\);`).FindAllSubmatch(src, -1) {
		defined = append(defined, string(m[1]))
	}
	listed := append([]string(nil), CoreMaps...)
	sort.Strings(defined)
	sort.Strings(listed)
	if len(defined) == 0 || len(defined) != len(listed) {
		t.Fatalf("aggregate.h defines %v, CoreMaps lists %v", defined, listed)
	}
	for i := range defined {
		if defined[i] != listed[i] {
			t.Fatalf("aggregate.h defines %v, CoreMaps lists %v", defined, listed)
		}
	}
}
