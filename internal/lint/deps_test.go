package lint

import (
	"bytes"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// TestLayering checks that packages do not depend on what they must not
// (STYLE.md, house rule 11): the SDK applications link stays light, and
// the arrows of the data flow point one way.
func TestLayering(t *testing.T) {
	const mod = "github.com/spanwatch/spanwatch/"
	for _, tc := range []struct {
		pkg    string
		forbid []string
		why    string
	}{
		{"emit", []string{mod + "snapshot", "encoding/json", "math/big"},
			"every instrumented application links emit: it shares the span event's sizes through internal/spanevent, not snapshot"},
	} {
		deps := goListDeps(t, mod+tc.pkg)
		for _, f := range tc.forbid {
			if deps[f] {
				t.Errorf("%s depends on %s: %s", tc.pkg, f, tc.why)
			}
		}
	}
}

// goListDeps returns the import paths pkg depends on, itself included.
func goListDeps(t *testing.T, pkg string) map[string]bool {
	t.Helper()
	gobin, err := exec.LookPath("go")
	if err != nil {
		gobin = filepath.Join(runtime.GOROOT(), "bin", "go")
	}
	cmd := exec.Command(gobin, "list", "-deps", pkg)
	cmd.Dir = "../.."
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list -deps %s: %v\n%s", pkg, err, stderr.Bytes())
	}
	deps := map[string]bool{}
	for _, p := range strings.Fields(string(out)) {
		deps[p] = true
	}
	return deps
}
