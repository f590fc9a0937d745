package policy

import (
	"errors"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/spanwatch/spanwatch/config/section"
)

var update = flag.Bool("update", false, "rewrite the golden .err files of testdata/bad")

// TestBadFiles loads every rule file in testdata/bad and compares the error
// with the golden .err file next to it. Each case must fail, and fail fast.
func TestBadFiles(t *testing.T) {
	files, err := filepath.Glob("testdata/bad/*.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if len(files) < 20 {
		t.Fatalf("found %d bad files, want the whole corpus", len(files))
	}
	for _, f := range files {
		name := strings.TrimSuffix(filepath.Base(f), ".yaml")
		t.Run(name, func(t *testing.T) {
			start := time.Now()
			cfg, err := LoadFile(f)
			if elapsed := time.Since(start); elapsed > 10*time.Second { // a bound against blow-ups, not a speed figure
				t.Errorf("took %v to reject", elapsed)
			}
			if err == nil {
				t.Fatalf("loaded without error: %d rules, %d policies", len(cfg.Rules), len(cfg.Policies))
			}
			var list section.ErrorList
			if !errors.As(err, &list) {
				t.Errorf("error is %T, want ErrorList", err)
			}
			got := err.Error() + "\n"
			golden := strings.TrimSuffix(f, ".yaml") + ".err"
			if *update {
				if err := os.WriteFile(golden, []byte(got), 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatalf("no golden file (run go test -run TestBadFiles -update): %v", err)
			}
			if got != string(want) {
				t.Errorf("error differs from %s\ngot:\n%s\nwant:\n%s", golden, got, want)
			}
		})
	}
}
