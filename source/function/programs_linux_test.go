//go:build linux

package function

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/spanwatch/spanwatch/internal/bpftest"
)

// The tests' programs are listed in test/vm/cprograms.txt (C) and
// test/vm/goprograms.txt (Go), which test/vm/run.sh builds for the VM's
// architecture before boot (the VM has no compiler) and this package's
// tests build here otherwise.
const (
	moduleRoot   = "../.."
	goRegistry   = "test/vm/goprograms.txt"
	goPrebuilt   = "SPANWATCH_VM_GOPROGRAMS" // where run.sh put the Go programs in the VM
	rootRequired = "needs root (CAP_BPF, CAP_PERFMON, CAP_SYS_ADMIN) to load BPF and attach uprobes"
)

// cProgram returns the path of the C program name of test/vm/cprograms.txt:
// in the VM, the one run.sh built (by aarch64-linux-gnu-gcc for arm64);
// here, built by gcc with the list's arguments into the test's directory.
// It skips without gcc.
func cProgram(t *testing.T, name string) string {
	t.Helper()
	if os.Getenv(bpftest.PrebuiltEnv) != "" || bpftest.InVM() {
		return bpftest.CProgram(t, name)
	}
	gcc, err := exec.LookPath("gcc")
	if err != nil {
		t.Skip("no gcc on PATH: install build-essential")
	}
	progs, err := bpftest.ReadRegistry(filepath.Join(moduleRoot, bpftest.Registry))
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range progs {
		if p.Name != name {
			continue
		}
		dir := t.TempDir()
		out := filepath.Join(dir, name)
		cmd := exec.Command(gcc, bpftest.Expand(p.Args, out, dir)...)
		cmd.Dir = moduleRoot
		if b, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("build %s: gcc %s: %v\n%s", name, strings.Join(cmd.Args[1:], " "), err, b)
		}
		return out
	}
	t.Fatalf("C program %s is not in %s", name, bpftest.Registry)
	return ""
}

// goProgram returns the path of the Go program name of
// test/vm/goprograms.txt: in the VM, the one run.sh built (GOARCH of the
// VM); here, built by the go command into the test's directory. It
// skips without a go command.
func goProgram(t *testing.T, name string) string {
	t.Helper()
	if dir := os.Getenv(goPrebuilt); dir != "" {
		p := filepath.Join(dir, name)
		if _, err := os.Stat(p); err != nil {
			t.Fatalf("Go program %s was not built for the VM (is it in %s?): %v", name, goRegistry, err)
		}
		return p
	}
	if bpftest.InVM() {
		t.Fatalf("Go program %s: %s is not set in the VM", name, goPrebuilt)
	}
	gobin := goCommand(t)
	f, err := os.Open(filepath.Join(moduleRoot, goRegistry))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for sc := bufio.NewScanner(f); sc.Scan(); {
		w := strings.Fields(sc.Text())
		if len(w) != 2 || w[0] != name {
			continue
		}
		out := filepath.Join(t.TempDir(), name)
		cmd := exec.Command(gobin, "build", "-o", out, w[1])
		cmd.Dir = moduleRoot
		if b, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("go build %s: %v: %s", w[1], err, b)
		}
		return out
	}
	t.Fatalf("Go program %s is not in %s", name, goRegistry)
	return ""
}

// goCommand returns the go command, or skips the test.
func goCommand(t *testing.T) string {
	t.Helper()
	gobin := filepath.Join(runtime.GOROOT(), "bin", "go")
	if _, err := os.Stat(gobin); err != nil {
		if gobin, err = exec.LookPath("go"); err != nil {
			t.Skip("no go command to build the test program")
		}
	}
	return gobin
}
