//go:build linux

package elfread

import (
	"context"
	"debug/elf"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestFindDebugFile splits a gcc -g program as dh_strip does and looks
// for its debug file in a directory taken as the root: by build id, by
// .gnu_debuglink beside the binary, in its .debug directory and under
// ROOT/usr/lib/debug/DIR; a file of another build in each place is
// refused with the reason (build id, or CRC), and the lookup goes on to
// the next place; a link (inside the root) to the build-id file is
// followed. Nothing is read outside the root.
func TestFindDebugFile(t *testing.T) {
	for _, tool := range []string{"gcc", "objcopy", "strip"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("no %s on PATH: install build-essential and binutils", tool)
		}
	}
	work := t.TempDir()
	src := filepath.Join(work, "p.c")
	if err := os.WriteFile(src, []byte("int f(int x) { return x * 3; }\nint main(int argc, char **argv) { return f(argc); }\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	run := func(argv ...string) {
		t.Helper()
		if out, err := exec.Command(argv[0], argv[1:]...).CombinedOutput(); err != nil {
			t.Fatalf("%v: %v: %s", argv, err, out)
		}
	}
	bin, dbg := filepath.Join(work, "p"), filepath.Join(work, "p.debug")
	other, otherDbg := filepath.Join(work, "q"), filepath.Join(work, "q.debug")
	run("gcc", "-O2", "-g", "-o", bin, src)
	run("gcc", "-O0", "-g", "-o", other, src)
	run("objcopy", "--only-keep-debug", "--compress-debug-sections", bin, dbg)
	run("objcopy", "--only-keep-debug", "--compress-debug-sections", other, otherDbg)
	run("strip", "--remove-section=.comment", "--remove-section=.note", "--strip-unneeded", bin)
	run("objcopy", "--add-gnu-debuglink="+dbg, bin)
	ef, err := elf.Open(bin)
	if err != nil {
		t.Fatal(err)
	}
	defer ef.Close()
	id := BuildID(ef)
	if len(id) < 4 {
		t.Skip("gcc links without a build id")
	}
	if name, _, ok := DebugLink(ef); !ok || name != "p.debug" {
		t.Fatalf("debuglink %q, %v; want p.debug", name, ok)
	}
	byID := filepath.Join("usr/lib/debug/.build-id", id[:2], id[2:]+".debug")
	for _, tc := range []struct {
		name    string
		files   map[string]string // path in the root: file (or "->target" for a link)
		want    string            // where it is found ("": nowhere)
		by      string
		refused []string // the refusals' starts
	}{
		{"build id", map[string]string{byID: dbg}, "/" + byID, "build id", nil},
		{"build id through a link", map[string]string{byID: "->../../p.debug", "usr/lib/debug/p.debug": dbg}, "/" + byID, "build id", nil},
		{"beside", map[string]string{"bin/p.debug": dbg}, "/bin/p.debug", ".gnu_debuglink", nil},
		{"in .debug", map[string]string{"bin/.debug/p.debug": dbg}, "/bin/.debug/p.debug", ".gnu_debuglink", nil},
		{"under /usr/lib/debug", map[string]string{"usr/lib/debug/bin/p.debug": dbg}, "/usr/lib/debug/bin/p.debug", ".gnu_debuglink", nil},
		{"another build everywhere", map[string]string{byID: otherDbg, "bin/p.debug": otherDbg}, "", "",
			[]string{"/" + byID + ": refused: its build id ", "/bin/p.debug: refused: its CRC32 "}},
		{"another build by id, the right one by link", map[string]string{byID: otherDbg, "usr/lib/debug/bin/p.debug": dbg}, "/usr/lib/debug/bin/p.debug", ".gnu_debuglink",
			[]string{"/" + byID + ": refused: its build id "}},
		{"none", nil, "", "", nil},
		// Links stay inside the root: the right file out of it is not
		// reached, by an absolute link or by "..".
		{"a link out of the root", map[string]string{byID: "->" + dbg, "bin/p.debug": "->../../../../../../../../../.." + dbg}, "", "", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			for p, f := range tc.files {
				at := filepath.Join(root, p)
				if err := os.MkdirAll(filepath.Dir(at), 0o755); err != nil {
					t.Fatal(err)
				}
				if target, ok := strings.CutPrefix(f, "->"); ok {
					if err := os.Symlink(target, at); err != nil {
						t.Fatal(err)
					}
					continue
				}
				b, err := os.ReadFile(f)
				if err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(at, b, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			df, refused := FindDebugFile(ef, DebugPlace{Ctx: context.Background(), Roots: []string{root}, Path: "/bin/p"})
			defer df.Close()
			got, by := "", ""
			if df != nil {
				got, by = strings.TrimPrefix(df.Path, root), df.By
				if BuildID(df.ELF) != id || df.ELF.Section(".debug_info") == nil {
					t.Errorf("found %s without the binary's build id or DWARF", df.Path)
				}
			}
			if got != tc.want || by != tc.by {
				t.Errorf("found %q by %q, want %q by %q (refused %q)", got, by, tc.want, tc.by, refused)
			}
			if len(refused) != len(tc.refused) {
				t.Fatalf("refused %q, want %q...", refused, tc.refused)
			}
			for i, r := range refused {
				if !strings.HasPrefix(strings.TrimPrefix(r, root), tc.refused[i]) {
					t.Errorf("refused %q, want %s...", r, tc.refused[i])
				}
			}
		})
	}
}
