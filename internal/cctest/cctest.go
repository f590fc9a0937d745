// Package cctest builds C programs for tests, as projects build them, and
// finds their symbols' file offsets (where a uprobe goes). Tests use it;
// the agent does not.
package cctest

import (
	"debug/elf"
	"os/exec"
	"strings"
	"testing"

	"github.com/spanwatch/spanwatch/internal/elfread"
)

// CC compiles C sources with the compiler cc and args into out, skipping
// the test when the compiler is missing. It returns out.
func CC(t testing.TB, cc, out string, args ...string) string {
	t.Helper()
	if _, err := exec.LookPath(cc); err != nil {
		t.Skipf("%s not installed (Debian package build-essential, clang or a cross compiler)", cc)
	}
	args = append([]string{"-Wall", "-o", out}, args...)
	if b, err := exec.Command(cc, args...).CombinedOutput(); err != nil {
		t.Fatalf("%s %s: %v\n%s", cc, strings.Join(args, " "), err, b)
	}
	return out
}

// SymbolOffset returns the file offset of a symbol of the ELF file at
// path, failing the test when it has none.
func SymbolOffset(t testing.TB, path, name string) uint64 {
	t.Helper()
	f, err := elf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	syms, err := f.Symbols()
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	for _, s := range syms {
		if s.Name == name {
			off, err := elfread.FileOffset(f, s.Value)
			if err != nil {
				t.Fatal(err)
			}
			return off
		}
	}
	t.Fatalf("%s: no symbol %s", path, name)
	return 0
}
