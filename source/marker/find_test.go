//go:build linux

package marker

import (
	"debug/elf"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/spanwatch/spanwatch/internal/cctest"
	"github.com/spanwatch/spanwatch/internal/elfbuild"
	"github.com/spanwatch/spanwatch/internal/userfile"
)

// findMarkerIn runs marker.Find on the file at path and returns what it
// found and the heap it allocated.
func findMarkerIn(t *testing.T, path string) (Found, error, uint64) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var a, b runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&a)
	m, err := Find(f)
	runtime.ReadMemStats(&b)
	return m, err, b.TotalAlloc - a.TotalAlloc
}

// TestFindMarkerSizeBombs: the /proc scan parses every executable any user
// runs. A 20 KB C program whose symbol table claims 128 MiB (a hole) took
// the agent from 239 MB to 1.14 GB in 2 s; a span SDK binary with a
// 256 MiB one, 2.78 GB. Now the table is read a chunk at a time up to a
// cap, and the SDK binary's marker is still found (through its pclntab).
func TestFindMarkerSizeBombs(t *testing.T) {
	dir := t.TempDir()
	app := filepath.Join(dir, "app")
	// An application that links the span SDK, built as applications are
	// (go test's binaries have no symbol table).
	gobin, err := exec.LookPath("go")
	if err != nil {
		t.Skipf("skipping: %v", err)
	}
	if out, err := exec.Command(gobin, "build", "-o", app, "github.com/spanwatch/spanwatch/examples/go-http").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	want, err, plain := findMarkerIn(t, app)
	if err != nil {
		t.Skipf("skipping: this test binary has no marker to find: %v", err)
	}
	if err := elfbuild.Patch(app, ".symtab", nil, 256<<20, 0); err != nil {
		t.Fatal(err)
	}
	before := userfile.Counts()[userfile.ReasonSymbols]
	got, err, n := findMarkerIn(t, app)
	if err != nil || got.Off != want.Off || got.Sem != want.Sem {
		t.Errorf("with a 256 MiB symbol table: %+v, %v; want %+v", got, err, want)
	}
	t.Logf("findMarker allocated %d MiB (%d MiB with the real symbol table)", n>>20, plain>>20)
	if n > plain+16<<20 {
		t.Errorf("findMarker allocated %d MiB with a 256 MiB symbol table, %d MiB without", n>>20, plain>>20)
	}
	if userfile.Counts()[userfile.ReasonSymbols] <= before {
		t.Error("the symbol table's cap was not counted")
	}

	cc, err := exec.LookPath("cc")
	if err != nil {
		t.Skipf("skipping the C program: %v", err)
	}
	src := filepath.Join(dir, "tiny.c")
	os.WriteFile(src, []byte("int main(void) { return 0; }\n"), 0o644)
	tiny := filepath.Join(dir, "tiny")
	if out, err := exec.Command(cc, "-O2", "-o", tiny, src).CombinedOutput(); err != nil {
		t.Fatalf("cc: %v\n%s", err, out)
	}
	if err := elfbuild.Patch(tiny, ".symtab", nil, 128<<20, 0); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(tiny).CombinedOutput(); err != nil {
		t.Fatalf("the patched program does not run: %v\n%s", err, out)
	}
	_, err, n = findMarkerIn(t, tiny)
	if !errors.Is(err, ErrNoMarker) {
		t.Errorf("tiny C program: %v, want ErrNoMarker", err)
	}
	if n > 4<<20 {
		t.Errorf("findMarker allocated %d MiB for a C program with a 128 MiB symbol table", n>>20)
	}
}

// TestCMarkerFound: findMarker finds libspanwatch's marker and probe word
// in binaries built from include/spanwatch.h as projects build them (PIE
// and not, static, stripped, gcc, clang and g++, a shared library, and a
// program linked with libspanwatch.a's object), at the offsets of their
// symbols; and refuses a file that has the magic but no marker where it
// points.
func TestCMarkerFound(t *testing.T) {
	dir := t.TempDir()
	src := "testdata/cmarker.c"
	lib := filepath.Join(dir, "libspanwatch.so")
	cases := []struct {
		name, cc string
		args     []string
		strip    bool
	}{
		{"gcc-O2", "gcc", []string{"-O2", src}, false},
		{"gcc-O0-nopie", "gcc", []string{"-O0", "-fno-pie", "-no-pie", src}, false},
		{"gcc-static", "gcc", []string{"-O2", "-static", src}, false},
		{"gcc-stripped", "gcc", []string{"-O2", src}, true},
		{"gcc-lto", "gcc", []string{"-O2", "-flto", src}, false},
		{"clang-O2", "clang", []string{"-O2", src}, false},
		{"gxx", "g++", []string{"-O2", "-x", "c++", src}, false},
		{"libspanwatch.so", "gcc", []string{"-O2", "-shared", "-fPIC", "../../sdk/c/src/spanwatch.c"}, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			out := filepath.Join(dir, tc.name)
			if tc.name == "libspanwatch.so" {
				out = lib
			}
			cctest.CC(t, tc.cc, out, tc.args...)
			want := cctest.SymbolOffset(t, out, "spanwatch_marker_")
			wantSem := cctest.SymbolOffset(t, out, "spanwatch_probe_")
			if tc.strip {
				if b, err := exec.Command("strip", out).CombinedOutput(); err != nil {
					t.Fatalf("strip: %v\n%s", err, b)
				}
			}
			f, err := os.Open(out)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			mk, err := Find(f)
			if err != nil {
				t.Fatalf("findMarker: %v", err)
			}
			if !mk.SysV || mk.Off != want || mk.Sem != wantSem {
				t.Errorf("found %+v, want the C marker at file offset 0x%x, its word at 0x%x", mk, want, wantSem)
			}
		})
	}
	t.Run("magic-without-marker", func(t *testing.T) {
		// The probe's bytes in a program's data, pointing at its own
		// data: no nop and ret there, no marker.
		c := filepath.Join(dir, "fake.c")
		os.WriteFile(c, []byte(`#include <stdint.h>
struct p { uint64_t w, m[2]; int64_t rel; uint32_t abi, st; } probe = {0, {0x4365626f72707773ull, ~0x4365626f72707773ull}, -24, 1, 0};
int main(void) { return (int)probe.w; }
`), 0o644)
		out := cctest.CC(t, "gcc", filepath.Join(dir, "fake"), "-O2", c)
		f, err := os.Open(out)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		if mk, err := Find(f); err != ErrNoMarker {
			t.Errorf("findMarker: %+v, %v; want ErrNoMarker", mk, err)
		}
	})
}

// TestCMarkerFoundCross: spanwatch.h's marker in binaries built for the
// other machine it has one for (AArch64 from x86-64, x86-64 from arm64),
// with a cross compiler: a collector refuses them (its BPF program reads
// its own machine's registers), and a collector of their machine finds
// the marker and the probe word at the offsets of their symbols.
func TestCMarkerFoundCross(t *testing.T) {
	requireCMarker(t)
	for _, cross := range []struct {
		cc      string
		machine elf.Machine
	}{
		{"aarch64-linux-gnu-gcc", elf.EM_AARCH64},
		{"x86_64-linux-gnu-gcc", elf.EM_X86_64},
	} {
		if cross.machine == nativeMachine {
			continue
		}
		t.Run(cross.machine.String(), func(t *testing.T) {
			dir := t.TempDir()
			src := "testdata/cmarker.c"
			for _, tc := range []struct {
				name  string
				args  []string
				strip bool
			}{
				{"O2", []string{"-O2", src}, false},
				{"static", []string{"-O2", "-static", src}, false},
				{"stripped", []string{"-O2", src}, true},
				{"libspanwatch.so", []string{"-O2", "-shared", "-fPIC", "../../sdk/c/src/spanwatch.c"}, false},
			} {
				t.Run(tc.name, func(t *testing.T) {
					out := cctest.CC(t, cross.cc, filepath.Join(dir, tc.name), tc.args...)
					want := cctest.SymbolOffset(t, out, "spanwatch_marker_")
					wantSem := cctest.SymbolOffset(t, out, "spanwatch_probe_")
					if tc.strip {
						strip := strings.TrimSuffix(cross.cc, "gcc") + "strip"
						if b, err := exec.Command(strip, out).CombinedOutput(); err != nil {
							t.Fatalf("%s: %v\n%s", strip, err, b)
						}
					}
					if mk, err, _ := findMarkerIn(t, out); err != ErrNoMarker {
						t.Errorf("a %s collector found %+v, %v in a %s binary; want ErrNoMarker", nativeMachine, mk, err, cross.machine)
					}
					native := nativeMachine
					nativeMachine = cross.machine
					mk, err, _ := findMarkerIn(t, out)
					nativeMachine = native
					if err != nil {
						t.Fatalf("findMarker as a %s collector: %v", cross.machine, err)
					}
					if !mk.SysV || mk.Off != want || mk.Sem != wantSem {
						t.Errorf("found %+v, want the C marker at file offset 0x%x, its word at 0x%x", mk, want, wantSem)
					}
				})
			}
		})
	}
}

// requireCMarker skips where libspanwatch has no marker (it has one on
// x86-64 and arm64).
func requireCMarker(t testing.TB) {
	t.Helper()
	if nativeMachine == elf.EM_NONE {
		t.Skipf("libspanwatch has no marker on %s", runtime.GOARCH)
	}
}
