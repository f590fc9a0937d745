//go:build linux

package function

import (
	"context"
	"debug/elf"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/spanwatch/spanwatch/collector"
	"github.com/spanwatch/spanwatch/internal/elfread"
	"github.com/spanwatch/spanwatch/internal/funcs"
	"github.com/spanwatch/spanwatch/internal/glob"
	"github.com/spanwatch/spanwatch/internal/srcspec"
)

// splitRoot is a directory a chrooted copy of paramsprog runs in, its
// binary stripped as Debian's dh_strip strips it.
type splitRoot struct {
	dir     string // the root
	buildID string
}

// needTools skips without gcc (and a static libc), objcopy, strip or
// chroot.
func needTools(t *testing.T) {
	t.Helper()
	for _, tool := range []string{"gcc", "objcopy", "strip", "chroot"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("no %s on PATH: install build-essential, binutils and coreutils", tool)
		}
	}
}

func run(t *testing.T, argv ...string) {
	t.Helper()
	if out, err := exec.Command(argv[0], argv[1:]...).CombinedOutput(); err != nil {
		t.Fatalf("%s: %v: %s", strings.Join(argv, " "), err, out)
	}
}

// buildStatic builds paramsprog.c -O2 -g, linked statically so that it
// runs chrooted with nothing else, with extra flags.
func buildStatic(t *testing.T, out string, extra ...string) {
	t.Helper()
	args := append([]string{"gcc", "-O2", "-g", "-static"}, extra...)
	args = append(args, "-o", out, "testdata/paramsprog.c")
	if b, err := exec.Command(args[0], args[1:]...).CombinedOutput(); err != nil {
		t.Skipf("gcc -static: %v: %s (a static libc, libc6-dev, is needed)", err, b)
	}
}

// makeSplitRoot builds paramsprog, splits its DWARF and symbol table
// off as dh_strip does (objcopy --only-keep-debug
// --compress-debug-sections; strip --remove-section=.comment
// --remove-section=.note --strip-unneeded; objcopy --add-gnu-debuglink)
// and installs the stripped binary as ROOT/bin/paramsprog and the debug
// file where place says: "build-id" (/usr/lib/debug/.build-id/ab/
// cdef....debug) or "debuglink" (/usr/lib/debug/bin/paramsprog.debug,
// found by the binary's .gnu_debuglink). debug, when not "", is another
// build's debug file installed there instead (a mismatch).
func makeSplitRoot(t *testing.T, place string, other bool) splitRoot {
	t.Helper()
	work := t.TempDir()
	full := filepath.Join(work, "paramsprog")
	buildStatic(t, full)
	ef, err := elf.Open(full)
	if err != nil {
		t.Fatal(err)
	}
	id := elfread.BuildID(ef)
	ef.Close()
	if len(id) < 4 {
		t.Skip("gcc links without a build id (--build-id)")
	}
	dbg := filepath.Join(work, "paramsprog.debug")
	run(t, "objcopy", "--only-keep-debug", "--compress-debug-sections", full, dbg)
	run(t, "strip", "--remove-section=.comment", "--remove-section=.note", "--strip-unneeded", full)
	run(t, "objcopy", "--add-gnu-debuglink="+dbg, full)
	if other {
		// Another build (another build id, another CRC) in its place.
		o := filepath.Join(work, "other")
		buildStatic(t, o, "-DOTHER_BUILD=1", "-fno-inline")
		run(t, "objcopy", "--only-keep-debug", "--compress-debug-sections", o, dbg)
	}
	root := filepath.Join(work, "root")
	var at string
	switch place {
	case "build-id":
		at = filepath.Join(root, "usr/lib/debug/.build-id", id[:2], id[2:]+".debug")
	case "debuglink":
		at = filepath.Join(root, "usr/lib/debug/bin/paramsprog.debug")
	}
	for _, d := range []string{filepath.Join(root, "bin"), filepath.Dir(at)} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	run(t, "cp", full, filepath.Join(root, "bin/paramsprog"))
	run(t, "cp", dbg, at)
	return splitRoot{dir: root, buildID: id}
}

// TestDebugFile traces handle(code, path, n) of paramsprog, built -O2
// -g and split as Debian splits its packages: the binary keeps neither
// DWARF nor .symtab (a static binary has no .dynsym either, so handle is
// named nowhere in it), its debug file is found in the root of the
// process running it (chrooted), by build id and, in a second root, by
// .gnu_debuglink under /usr/lib/debug/DIR; the target names the binary
// through /proc/PID/root, or the process (process: its name, pid: its
// pid), whose /proc/PID/exe names the file by its path on the host (a
// chroot), cut to the path inside the process's root for the debuglink
// lookup. The function is found by the
// debug file's symbols, its parameters placed from the debug file's
// (compressed) DWARF: the 9 label sets of exactly 1,000 spans each, as
// TestParamsC's. A debug file of another build in either place is
// refused, and the attach says why.
func TestDebugFile(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root (CAP_BPF, CAP_PERFMON, CAP_SYS_ADMIN) to load BPF, attach uprobes and chroot")
	}
	if runtime.GOARCH != "amd64" {
		t.Skip("arguments are tested on x86-64 so far")
	}
	needTools(t)
	for _, tc := range []struct{ place, target string }{
		{"build-id", "binary"},
		{"debuglink", "binary"},
		// The process's executable through /proc/PID/exe, its debug
		// file in the process's root.
		{"build-id", "process"},
		{"debuglink", "pid"},
	} {
		t.Run(tc.place+" "+tc.target, func(t *testing.T) {
			r := makeSplitRoot(t, tc.place, false)
			got, counts, _, traced := runArgsIn(t, t.TempDir(), []string{"chroot", r.dir, "/bin/paramsprog"}, func(pid int) string {
				var what string
				switch tc.target {
				case "binary":
					what = fmt.Sprintf("binary: /proc/%d/root/bin/paramsprog", pid)
				case "process":
					what = "process: paramsprog"
				case "pid":
					what = fmt.Sprintf("pid: %d", pid)
				}
				return fmt.Sprintf(`- %s
  function: handle
  labels: {status: {param: code}, route: {param: path}}
  error: ret.s32 == -1
`, what)
			}, "handle", []string{"status", "route"})
			checkArgs(t, got, wantArgs("status", "route"))
			checkNoCounts(t, counts)
			if len(traced) != 1 || traced[0].Func.Source != funcs.SourceDebugSymtab {
				t.Errorf("traced %+v, want handle found by the debug file's .symtab", traced)
			}
		})
	}

	// Another build's debug file, where the build id and the debuglink
	// lead: refused, by build id and by CRC.
	for _, tc := range []struct{ place, want string }{
		{"build-id", "refused: its build id "},
		{"debuglink", "refused: its CRC32 "},
	} {
		t.Run("mismatch "+tc.place, func(t *testing.T) {
			r := makeSplitRoot(t, tc.place, true)
			p := startCall(t, "chroot", r.dir, "/bin/paramsprog", "9")
			bin := fmt.Sprintf("/proc/%d/root/bin/paramsprog", p.cmd.Process.Pid)
			c, err := collector.New(context.Background(), collector.Config{Sources: collector.Sources{Marker: true}, ScanInterval: -1})
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			all, _ := glob.Compile("*")
			target := Target{Binary: bin, Functions: all,
				Labels:        srcspec.Labels{List: []srcspec.Label{{Name: "status", OperandName: "code"}}},
				LabelOperands: []Operand{{Param: "code", Reg: -1, LenReg: -1, Text: "param code"}}}
			s, err := Attach(context.Background(), c.SourceCore(), []Target{target})
			if err == nil {
				s.Close()
				t.Fatalf("attached with another build's debug file")
			}
			if !strings.Contains(err.Error(), ": no DWARF for ") || !strings.Contains(err.Error(), tc.want) || (tc.place == "build-id" && !strings.Contains(err.Error(), "is not the binary's "+r.buildID)) {
				t.Errorf("got %v, want no DWARF, the debug file %s", err, tc.want)
			} else {
				t.Logf("refused: %v", err)
			}
		})
	}
}

// TestDebianLibc traces glibc's getaddrinfo in Debian's libc.so.6, which
// ships stripped, with its DWARF and .symtab in libc6-dbg's
// /usr/lib/debug/.build-id/ab/cdef.debug, in one process (pid: with
// binary: the library as the process maps it), labelled by its
// parameter name (const char *name, from the debug file's DWARF): 3
// hosts, exactly argsCalls/3 spans each, the non-address's all errors
// (EAI_NONAME, a negative int). Skipped without the debug file.
func TestDebianLibc(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root (CAP_BPF, CAP_PERFMON, CAP_SYS_ADMIN) to load BPF and attach uprobes")
	}
	if runtime.GOARCH != "amd64" {
		t.Skip("arguments are tested on x86-64 so far")
	}
	const libc = "/usr/lib/x86_64-linux-gnu/libc.so.6"
	f, err := os.Open(libc)
	if err != nil {
		t.Skipf("no %s: %v", libc, err)
	}
	defer f.Close()
	ef, err := elfread.NewFile(f)
	if err != nil {
		t.Fatal(err)
	}
	df, _ := elfread.FindDebugFile(ef, elfread.DebugPlace{Ctx: context.Background(), Roots: []string{"/"}, Path: libc})
	if df == nil {
		t.Skip("no debug file for " + libc + ": install libc6-dbg")
	}
	df.Close()
	cc, err := exec.LookPath("gcc")
	if err != nil {
		t.Skip("no gcc on PATH: install build-essential")
	}
	dir := t.TempDir()
	prog := filepath.Join(dir, "gaiprog")
	if out, err := exec.Command(cc, "-O2", "-o", prog, "testdata/gaiprog.c").CombinedOutput(); err != nil {
		t.Fatalf("gcc: %v: %s", err, out)
	}
	got, counts, _, traced := runArgsIn(t, dir, []string{prog}, func(pid int) string {
		return fmt.Sprintf(`- pid: %d
  binary: %s
  function: getaddrinfo
  labels: {host: {param: name}}
  error: ret.s32 < 0
`, pid, libc)
	}, "getaddrinfo", []string{"host"})
	if len(traced) != 1 || traced[0].Func.Source != funcs.SourceDebugSymtab {
		t.Errorf("traced %+v, want getaddrinfo named by the debug file's .symtab", traced)
	}
	want := map[string]argSeries{
		"host=127.0.0.1":      {argsCalls / 3, 0},
		"host=::1":            {argsCalls / 3, 0},
		"host=not-an-address": {argsCalls / 3, argsCalls / 3},
	}
	checkArgs(t, got, want)
	checkNoCounts(t, counts)
}
