//go:build linux

package bpftest

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// Registry is the list of the C programs tests run, relative to the module
// root (one line per program: NAME GCC-ARGUMENTS...).
const Registry = "test/vm/cprograms.txt"

// PrebuiltEnv names the directory where test/vm/run.sh puts the programs
// of Registry for a test binary in the VM, which has no compiler.
const PrebuiltEnv = "SPANWATCH_VM_CPROGRAMS"

// CProgram returns the path of the C program name of Registry: built in
// the test's temporary directory (with the libraries of the list it
// links), or, in the VM, the one run.sh built before boot. It skips the
// test when the machine has no C compiler or no sys/sdt.h, and fails it
// when a build fails, or in the VM when the program is missing.
func CProgram(tb testing.TB, name string) string {
	tb.Helper()
	if dir := os.Getenv(PrebuiltEnv); dir != "" {
		p := filepath.Join(dir, name)
		if _, err := os.Stat(p); err != nil {
			tb.Fatalf("C program %s was not built for the VM (is it in %s?): %v", name, Registry, err)
		}
		return p
	}
	if InVM() {
		tb.Fatalf("C program %s: %s is not set in the VM", name, PrebuiltEnv)
	}
	if _, err := exec.LookPath("gcc"); err != nil {
		tb.Skip("no C compiler (gcc) on PATH: install build-essential")
	}
	if !haveSDT() {
		tb.Skip("no sys/sdt.h: install systemtap-sdt-dev")
	}
	p, err := buildC(name, tb.TempDir())
	if err != nil {
		tb.Fatal(err)
	}
	return p
}

func haveSDT() bool {
	for _, p := range []string{"/usr/include/x86_64-linux-gnu/sys/sdt.h", "/usr/include/sys/sdt.h"} {
		if _, err := os.Stat(p); err == nil {
			return true
		}
	}
	return false
}

// buildC builds name in dir, and the libraries of the list it links.
func buildC(name, dir string) (string, error) {
	root, err := moduleRoot()
	if err != nil {
		return "", err
	}
	progs, err := ReadRegistry(filepath.Join(root, Registry))
	if err != nil {
		return "", err
	}
	var args []string
	for _, p := range progs {
		if p.Name == name {
			args = p.Args
		}
	}
	if args == nil {
		return "", fmt.Errorf("C program %s is not in %s", name, Registry)
	}
	for _, a := range args {
		if lib, ok := strings.CutPrefix(a, "-l"); ok {
			if _, err := buildC("lib"+lib+".so", dir); err != nil {
				return "", err
			}
		}
	}
	out := filepath.Join(dir, name)
	cmd := exec.Command("gcc", Expand(args, out, dir)...)
	cmd.Dir = root
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("build C program %s: gcc %s: %v\n%s", name, strings.Join(cmd.Args[1:], " "), err, b)
	}
	return out, nil
}

// A CProgramSpec is one line of Registry.
type CProgramSpec struct {
	Name string
	Args []string // gcc's arguments, with {out} and {dir}
}

// ReadRegistry reads the list of C programs.
func ReadRegistry(path string) ([]CProgramSpec, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []CProgramSpec
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		f := strings.Fields(line)
		if len(f) < 2 {
			return nil, fmt.Errorf("%s:%d: want NAME GCC-ARGUMENTS...", path, n)
		}
		out = append(out, CProgramSpec{Name: f[0], Args: f[1:]})
	}
	return out, sc.Err()
}

// Expand puts the output path and its directory in a line's arguments.
func Expand(args []string, out, dir string) []string {
	r := strings.NewReplacer("{out}", out, "{dir}", dir)
	x := make([]string, len(args))
	for i, a := range args {
		x[i] = r.Replace(a)
	}
	return x
}

// moduleRoot finds the directory of go.mod from the working directory
// (a package's, under go test).
func moduleRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("no go.mod above the working directory")
		}
		dir = parent
	}
}
