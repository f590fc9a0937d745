package deploy

import (
	"debug/elf"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestImage runs deploy/image.sh: it builds the static binary with the
// documented -ldflags, checks that "spanwatch --version" prints the
// stamped version, and, where a Docker daemon runs, builds the image from
// the Dockerfile (FROM scratch: nothing pulled) and runs it. The test
// checks the binary is static (no interpreter, no shared libraries), as
// an image with nothing else in it needs.
func TestImage(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: builds spanwatch")
	}
	ctx := t.TempDir()
	const version = "v0.0.0-imagetest"
	out, err := exec.Command("./image.sh", "--smoke", "--version", version, "--tag", "spanwatch-test:imagetest", "--context", ctx).CombinedOutput()
	if err != nil {
		t.Fatalf("deploy/image.sh: %v\n%s", err, out)
	}
	if !regexp.MustCompile(`(?m)^image: built spanwatch ` + regexp.QuoteMeta(version) + ` \(revision [0-9a-f]{40}`).Match(out) {
		t.Errorf("deploy/image.sh did not print the stamped version and revision:\n%s", out)
	}
	f, err := elf.Open(filepath.Join(ctx, "spanwatch"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			t.Error("the image's binary has an ELF interpreter: it is not static")
		}
	}
	if libs, _ := f.ImportedLibraries(); len(libs) > 0 {
		t.Errorf("the image's binary needs shared libraries %v", libs)
	}
	if reason, ok := strings.CutPrefix(lastLine(out), "image: not built: "); ok {
		t.Skipf("the binary is built and stamped; the image is not: %s", reason)
	}
	if !strings.Contains(string(out), "image: spanwatch-test:imagetest runs: spanwatch "+version) {
		t.Errorf("the image did not run:\n%s", out)
	}
	exec.Command("docker", "rmi", "spanwatch-test:imagetest").Run()
}

func lastLine(b []byte) string {
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	return lines[len(lines)-1]
}
