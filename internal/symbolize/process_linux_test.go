//go:build linux

package symbolize

import (
	"bufio"
	"bytes"
	"context"
	"debug/elf"
	"debug/gosym"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/spanwatch/spanwatch/internal/userfile"
	"github.com/spanwatch/spanwatch/snapshot"
)

func TestKernel(t *testing.T) {
	b, err := os.ReadFile("/proc/kallsyms")
	if err != nil {
		t.Skipf("skipping: %v", err)
	}
	var addr uint64
	for line := range strings.SplitSeq(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) == 3 && f[2] == "vfs_read" {
			fmt.Sscanf(f[0], "%x", &addr)
		}
	}
	s := New(Config{})
	defer s.Close()
	frames, err := s.Kernel([]uint64{addr + 5, 0})
	if addr == 0 {
		if !errors.Is(err, ErrKernelHidden) {
			t.Fatalf("kallsyms hides addresses but Kernel returned %v", err)
		}
		t.Skipf("skipping: kallsyms hides addresses here: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	want := snapshot.Frame{Addr: addr + 5, Function: "vfs_read", Module: "kernel", Offset: 5}
	if frames[0] != want {
		t.Errorf("frame = %+v, want %+v", frames[0], want)
	}
	if frames[1] != (snapshot.Frame{}) {
		t.Errorf("address 0 = %+v, want an empty frame", frames[1])
	}
}

// loadBase returns the address bin's first mapping starts at in process
// pid, and the file offset it maps.
func loadBase(t testing.TB, pid int, bin string) (start, offset uint64) {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/maps", pid))
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) == 6 && f[5] == bin && f[1][2] == 'x' {
			var end uint64
			fmt.Sscanf(f[0], "%x-%x", &start, &end)
			fmt.Sscanf(f[2], "%x", &offset)
			return start, offset
		}
	}
	t.Fatalf("%s not mapped executable in process %d", bin, pid)
	return 0, 0
}

// runtimeAddrs returns the run-time addresses of the named functions of a
// running bin (plus off bytes), from its symbol table and load address.
func runtimeAddrs(t testing.TB, pid int, bin string, off uint64, names ...string) []uint64 {
	t.Helper()
	ef, err := elf.Open(bin)
	if err != nil {
		t.Fatal(err)
	}
	defer ef.Close()
	syms, err := ef.Symbols()
	if err != nil {
		t.Fatal(err)
	}
	start, mapOff := loadBase(t, pid, bin)
	var out []uint64
	for _, n := range names {
		for _, s := range syms {
			if s.Name != n || elf.ST_TYPE(s.Info) != elf.STT_FUNC {
				continue
			}
			for _, p := range ef.Progs {
				if p.Type == elf.PT_LOAD && s.Value >= p.Vaddr && s.Value < p.Vaddr+p.Filesz {
					out = append(out, s.Value-p.Vaddr+p.Off-mapOff+start+off)
				}
			}
		}
	}
	if len(out) != len(names) {
		t.Fatalf("found %d of %v in %s", len(out), names, bin)
	}
	return out
}

// TestExitedProcess symbolizes addresses of a C program after it exited
// and after its binary was deleted: Capture kept the open file. It needs
// no BPF, only a C compiler.
func TestExitedProcess(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "cprog")
	buildC(t, bin, filepath.Join("testdata", "cprog.c"))
	cmd, stdin := startBlocked(t, bin)
	pid := cmd.Process.Pid
	// Return addresses point after a call; give each +1 so that the
	// lookup of (addr-1) for frames past the first stays in the function.
	addrs := runtimeAddrs(t, pid, bin, 1, "slow", "c", "b", "a", "main")

	s := New(Config{})
	defer s.Close()
	if err := s.Capture(uint32(pid)); err != nil {
		t.Fatal(err)
	}
	stdin.Close()
	if err := cmd.Wait(); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(bin); err != nil {
		t.Fatal(err)
	}
	frames, err := s.User(uint32(pid), addrs)
	if err != nil {
		t.Fatal(err)
	}
	for i, want := range []string{"slow", "c", "b", "a", "main"} {
		if frames[i].Function != want || filepath.Base(frames[i].File) != "cprog.c" || frames[i].Line == 0 || frames[i].Module != "cprog" {
			t.Errorf("frame %d = %+v, want %s in cprog.c", i, frames[i], want)
		}
	}

	// A process never captured and gone: frames keep their addresses.
	frames, err = s.User(uint32(pid)+1<<20, addrs[:1])
	if err == nil || frames[0].Addr != addrs[0] {
		t.Errorf("unknown process: frames %+v, error %v; want the address and an error", frames, err)
	}
}

// TestPerfMap symbolizes fake JIT frames of a running process from the
// perf map it would have written, then again after the process exited.
func TestPerfMap(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "cprog")
	buildC(t, bin, filepath.Join("testdata", "cprog.c"))
	cmd, stdin := startBlocked(t, bin)
	pid := cmd.Process.Pid
	path := fmt.Sprintf("/tmp/perf-%d.map", pid)
	// Ranges in unmapped memory, as a JIT's code would be in memory the
	// test did not map; the second line for 0x10000100 replaces the first,
	// as when a JIT reuses a range.
	content := "10000000 100 jit_alpha\n" +
		"0x10000100 0x80 LazyCompile:*old foo.js:1\n" +
		"0x10000100 0x80 LazyCompile:*beta foo.js:12\n" +
		"garbage line\n"
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Skipf("skipping: cannot write %s: %v", path, err)
	}
	t.Cleanup(func() { os.Remove(path) })

	s := New(Config{})
	defer s.Close()
	if err := s.Capture(uint32(pid)); err != nil {
		t.Fatal(err)
	}
	stdin.Close()
	if err := cmd.Wait(); err != nil {
		t.Fatal(err)
	}
	os.Remove(path)
	frames, err := s.User(uint32(pid), []uint64{0x10000010, 0x10000150, 0x10000300})
	if err != nil {
		t.Fatal(err)
	}
	want := []snapshot.Frame{
		{Addr: 0x10000010, Function: "jit_alpha", Module: filepath.Base(path), Offset: 0x10},
		{Addr: 0x10000150, Function: "LazyCompile:*beta foo.js:12", Module: filepath.Base(path), Offset: 0x50},
		{Addr: 0x10000300},
	}
	for i := range want {
		if frames[i] != want[i] {
			t.Errorf("frame %d = %+v, want %+v", i, frames[i], want[i])
		}
	}
}

// TestExec captures a shell, lets it exec the C program, and captures
// again: the new image must replace the old mappings.
func TestExec(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "cprog")
	buildC(t, bin, filepath.Join("testdata", "cprog.c"))
	cmd := exec.Command("/bin/sh", "-c", "read x; exec "+bin)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Skipf("skipping: %v", err)
	}
	t.Cleanup(func() { stdin.Close(); cmd.Process.Kill(); cmd.Wait() })
	pid := cmd.Process.Pid
	s := New(Config{})
	defer s.Close()
	// The shell may not have reached "read" yet; any capture of it will do.
	if err := s.Capture(uint32(pid)); err != nil {
		t.Fatal(err)
	}
	before := s.procs[uint32(pid)].key
	io.WriteString(stdin, "go\n")
	if line, err := bufio.NewReader(stdout).ReadString('\n'); err != nil || line != "ready\n" {
		t.Fatalf("read ready: %q, %v", line, err)
	}
	if err := s.Capture(uint32(pid)); err != nil {
		t.Fatal(err)
	}
	p := s.procs[uint32(pid)]
	if p.key == before {
		t.Errorf("process key unchanged across exec: %+v", p.key)
	}
	found := false
	for _, m := range p.mappings {
		found = found || m.name == "cprog"
	}
	if !found {
		t.Errorf("after exec the mappings do not include cprog: %+v", p.mappings)
	}
	frames, err := s.User(uint32(pid), runtimeAddrs(t, pid, bin, 0, "slow"))
	if err != nil || frames[0].Function != "slow" {
		t.Errorf("after exec: %+v, %v; want slow", frames, err)
	}
}

// TestVDSO names a frame in the vDSO, which is no file: the symbolizer
// reads its image from the process's memory.
func TestVDSO(t *testing.T) {
	b, err := os.ReadFile("/proc/self/maps")
	if err != nil {
		t.Skipf("skipping: %v", err)
	}
	var start, end uint64
	for line := range strings.SplitSeq(string(b), "\n") {
		if strings.HasSuffix(line, "[vdso]") {
			fmt.Sscanf(line, "%x-%x", &start, &end)
		}
	}
	if start == 0 {
		t.Skip("skipping: no vDSO mapped")
	}
	mem, err := os.Open("/proc/self/mem")
	if err != nil {
		t.Fatal(err)
	}
	defer mem.Close()
	ef, err := elf.NewFile(io.NewSectionReader(mem, int64(start), int64(end-start)))
	if err != nil {
		t.Fatal(err)
	}
	syms, err := ef.DynamicSymbols()
	if err != nil {
		t.Fatal(err)
	}
	var fn elf.Symbol
	for _, s := range syms {
		if s.Name == "__vdso_clock_gettime" || s.Name == "clock_gettime" && fn.Name == "" {
			fn = s
		}
	}
	if fn.Value == 0 {
		t.Skip("skipping: vDSO has no clock_gettime")
	}
	addr := start + fn.Value + 2 // the vDSO's first segment maps at 0
	s := New(Config{})
	defer s.Close()
	frames, err := s.User(uint32(os.Getpid()), []uint64{addr})
	if err != nil {
		t.Fatal(err)
	}
	if f := frames[0]; f.Module != "[vdso]" || (f.Function != "__vdso_clock_gettime" && f.Function != "clock_gettime") || f.Offset != fn.Value+2 {
		t.Errorf("frame %+v, want clock_gettime in [vdso] at offset %#x", f, fn.Value+2)
	}
}

// TestDebugFile symbolizes a stripped C binary from its separate debug
// file: found by build id inside the process's root (as Debian's -dbgsym
// packages install them, or through a link as Fedora's do), or by
// .gnu_debuglink next to the binary. A link out of the root stays inside
// it, and a debug file of another build is refused.
func TestDebugFile(t *testing.T) {
	dir := t.TempDir()
	full := filepath.Join(dir, "cprog-full")
	buildC(t, full, filepath.Join("testdata", "cprog.c"))
	bin := filepath.Join(dir, "cprog")
	run(t, "strip", "--strip-all", "-o", bin, full)
	// Another program, whose one big function covers the addresses of
	// cprog's: its debug file, wrongly taken, would name them "evil".
	other := filepath.Join(dir, "other-full")
	src := filepath.Join(dir, "other.c")
	body := "volatile int v;\nvoid evil(void) {\n" + strings.Repeat("v++;\n", 2000) + "}\nint main(void) { evil(); return 0; }\n"
	if err := os.WriteFile(src, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	buildC(t, other, src)

	ef, err := elf.Open(full)
	if err != nil {
		t.Fatal(err)
	}
	id := readBuildID(ef)
	var slow uint64
	syms, _ := ef.Symbols()
	for _, s := range syms {
		if s.Name == "slow" {
			slow = s.Value
		}
	}
	ef.Close()
	rel := filepath.Join("usr/lib/debug/.build-id", id[:2], id[2:]+".debug")
	place := func(t *testing.T, root, name string, from string) {
		t.Helper()
		p := filepath.Join(root, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		run(t, "objcopy", "--only-keep-debug", from, p)
	}
	link := func(t *testing.T, root, name, target string) {
		t.Helper()
		p := filepath.Join(root, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(target, p); err != nil {
			t.Fatal(err)
		}
	}
	// The debug link names cprog.debug, with the CRC of that file.
	linked := filepath.Join(dir, "cprog-linked")
	run(t, "objcopy", "--only-keep-debug", full, filepath.Join(dir, "cprog.debug"))
	run(t, "objcopy", "--add-gnu-debuglink="+filepath.Join(dir, "cprog.debug"), "--remove-section=.note.gnu.build-id", bin, linked)

	for _, tc := range []struct {
		name   string
		bin    string
		setup  func(t *testing.T, root string)
		wantFn string
	}{
		{"none", bin, func(*testing.T, string) {}, ""},
		{"build id", bin, func(t *testing.T, root string) { place(t, root, rel, full) }, "slow"},
		{"build id, relative link inside the root", bin, func(t *testing.T, root string) {
			place(t, root, "usr/lib/debug/usr/bin/cprog.debug", full)
			link(t, root, rel, "../../usr/bin/cprog.debug")
		}, "slow"},
		{"build id, absolute link out of the root", bin, func(t *testing.T, root string) {
			// Outside the root, at the path the link names; inside, that
			// path does not exist.
			outside := filepath.Join(dir, "outside.debug")
			run(t, "objcopy", "--only-keep-debug", full, outside)
			link(t, root, rel, outside)
		}, ""},
		{"build id of another binary", bin, func(t *testing.T, root string) { place(t, root, rel, other) }, ""},
		{"debug link next to the binary", linked, func(t *testing.T, root string) {
			place(t, root, filepath.Join(filepath.Dir(linked), ".debug", "cprog.debug"), full)
		}, "slow"},
		{"debug link, CRC of another file", linked, func(t *testing.T, root string) {
			place(t, root, filepath.Join(filepath.Dir(linked), "cprog.debug"), other)
		}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			tc.setup(t, root)
			s := New(Config{})
			defer s.Close()
			r := lookupFile(t, s, tc.bin, &debugPlace{root: root, path: tc.bin}, slow+4)
			if r.fn != tc.wantFn || (tc.wantFn != "") != (filepath.Base(r.file) == "cprog.c" && r.line > 0) {
				t.Errorf("%q %q:%d, want %q in cprog.c", r.fn, r.file, r.line, tc.wantFn)
			}
		})
	}
}

// TestTruncatedBinary truncates a Go binary on disk after its process
// exited, with its pclntab mapped: lookups fault, and the symbolizer must
// turn the fault into unnamed frames instead of crashing.
func TestTruncatedBinary(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "goprog")
	buildGo(t, bin, filepath.Join("testdata", "goprog", "main.go"))
	ef, err := elf.Open(bin)
	if err != nil {
		t.Fatal(err)
	}
	data, _ := ef.Section(".gopclntab").Data()
	tab, err := gosym.NewTable(nil, gosym.NewLineTable(data, ef.Section(".text").Addr))
	ef.Close()
	if err != nil {
		t.Fatal(err)
	}
	a, b := tab.LookupFunc("main.a").Entry, tab.LookupFunc("main.b").Entry // not PIE: run-time addresses

	cmd, stdin := startBlocked(t, bin)
	pid := uint32(cmd.Process.Pid)
	s := New(Config{})
	defer s.Close()
	if err := s.Capture(pid); err != nil {
		t.Fatal(err)
	}
	frames, err := s.User(pid, []uint64{a + 1})
	if err != nil || frames[0].Function != "main.a" {
		t.Fatalf("before truncation: %+v, %v", frames, err)
	}
	stdin.Close()
	cmd.Wait()
	if err := os.Truncate(bin, 4096); err != nil {
		t.Fatal(err)
	}
	frames, err = s.User(pid, []uint64{b + 1})
	if err != nil {
		t.Fatal(err)
	}
	// The function names were parsed before; the line tables, read from
	// the mapping on demand, are gone.
	if f := frames[0]; f.File != "" || f.Line != 0 || f.Module != "goprog" || f.Offset != b+1 {
		t.Errorf("after truncation: %#v, want goprog+%#x without file and line", f, b+1)
	}
}

// TestContainer runs the C program as PID 1 of new mount and PID
// namespaces, from a tmpfs mounted on /mnt and with a tmpfs /tmp, both
// private to the namespace: its path (/mnt/spanwatch-cprog) and its /tmp
// exist only inside, as in a container. The binary is reached through
// /proc/PID/map_files, or /proc/PID/root without them, and the JIT perf
// map in its own /tmp under its own PID (1). The process has exited by the
// time its stack is symbolized.
func TestContainer(t *testing.T) {
	unshare, err := exec.LookPath("unshare")
	if err != nil {
		t.Skipf("skipping: %v", err)
	}
	const mapped = "/mnt/spanwatch-cprog"
	if _, err := os.Stat("/mnt"); err != nil {
		t.Skipf("skipping: no /mnt to mount over: %v", err)
	}
	if _, err := os.Stat(mapped); err == nil {
		t.Skipf("skipping: %s exists on the host", mapped)
	}
	bin := filepath.Join(t.TempDir(), "cprog")
	buildC(t, bin, filepath.Join("testdata", "cprog.c"))

	for _, tc := range []struct {
		name       string
		noMapFiles bool
	}{{"map_files", false}, {"root", true}} {
		t.Run(tc.name, func(t *testing.T) {
			script := fmt.Sprintf("mount -t tmpfs none /mnt && cp %s %s && mount -t tmpfs none /tmp && exec %s", bin, mapped, mapped)
			cmd := exec.Command(unshare, "--mount", "--pid", "--fork", "--kill-child", "--propagation", "private", "/bin/sh", "-c", script)
			stdin, _ := cmd.StdinPipe()
			stdout, _ := cmd.StdoutPipe()
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { stdin.Close(); cmd.Process.Kill(); cmd.Wait() })
			if line, err := bufio.NewReader(stdout).ReadString('\n'); err != nil || line != "ready\n" {
				t.Skipf("skipping: the program did not start in new namespaces: %q, %v", line, err)
			}
			pid := childOf(t, cmd.Process.Pid)
			if status, _ := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid)); !strings.Contains(string(status), fmt.Sprintf("NSpid:\t%d\t1\n", pid)) {
				t.Fatalf("process %d is not PID 1 of a new namespace:\n%s", pid, status)
			}
			addrs := runtimeAddrsIn(t, pid, bin, mapped, 1, "slow", "c", "b", "a", "main")
			// The container's /tmp, written as its JIT would.
			perf := fmt.Sprintf("/proc/%d/root/tmp/perf-1.map", pid)
			if err := os.WriteFile(perf, []byte("10000000 100 jit_in_container\n"), 0o644); err != nil {
				t.Fatal(err)
			}
			if _, err := os.Stat("/tmp/perf-1.map"); err == nil {
				t.Fatal("the container's /tmp is the host's")
			}

			s := New(Config{})
			s.noMapFiles = tc.noMapFiles
			defer s.Close()
			if err := s.Capture(uint32(pid)); err != nil {
				t.Fatal(err)
			}
			stdin.Close()
			cmd.Wait()
			frames, err := s.User(uint32(pid), append(addrs, 0x10000010))
			if err != nil {
				t.Fatal(err)
			}
			for i, want := range []string{"slow", "c", "b", "a", "main", "jit_in_container"} {
				if frames[i].Function != want {
					t.Errorf("frame %d = %+v, want %s", i, frames[i], want)
				}
			}
			if frames[0].Module != filepath.Base(mapped) || filepath.Base(frames[0].File) != "cprog.c" {
				t.Errorf("frame 0 = %+v, want cprog.c in %s", frames[0], filepath.Base(mapped))
			}
		})
	}
}

// childOf returns the PID of ppid's child.
func childOf(t *testing.T, ppid int) int {
	t.Helper()
	for range 100 {
		ents, _ := os.ReadDir("/proc")
		for _, e := range ents {
			b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
			if err != nil {
				continue
			}
			f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:]))
			if len(f) > 1 && f[1] == fmt.Sprint(ppid) {
				var pid int
				fmt.Sscan(e.Name(), &pid)
				return pid
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("no child of %d", ppid)
	return 0
}

// runtimeAddrsIn is runtimeAddrs for a binary the process maps under
// another path (its path inside the container).
func runtimeAddrsIn(t testing.TB, pid int, bin, mapped string, off uint64, names ...string) []uint64 {
	t.Helper()
	ef, err := elf.Open(bin)
	if err != nil {
		t.Fatal(err)
	}
	defer ef.Close()
	syms, err := ef.Symbols()
	if err != nil {
		t.Fatal(err)
	}
	start, mapOff := loadBase(t, pid, mapped)
	var out []uint64
	for _, n := range names {
		for _, s := range syms {
			if s.Name != n || elf.ST_TYPE(s.Info) != elf.STT_FUNC {
				continue
			}
			for _, p := range ef.Progs {
				if p.Type == elf.PT_LOAD && s.Value >= p.Vaddr && s.Value < p.Vaddr+p.Filesz {
					out = append(out, s.Value-p.Vaddr+p.Off-mapOff+start+off)
				}
			}
		}
	}
	if len(out) != len(names) {
		t.Fatalf("found %d of %v in %s", len(out), names, bin)
	}
	return out
}

// TestEviction bounds the processes kept and checks that files are shared
// between processes, and closed with the last process that mapped them.
func TestEviction(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "cprog")
	buildC(t, bin, filepath.Join("testdata", "cprog.c"))
	c1, in1 := startBlocked(t, bin)
	c2, in2 := startBlocked(t, bin)
	defer in1.Close()
	defer in2.Close()
	fds := func() int {
		ents, err := os.ReadDir("/proc/self/fd")
		if err != nil {
			t.Fatal(err)
		}
		return len(ents)
	}
	before := fds()
	s := New(Config{MaxProcesses: 1})
	p1, p2 := uint32(c1.Process.Pid), uint32(c2.Process.Pid)
	if err := s.Capture(p1); err != nil {
		t.Fatal(err)
	}
	opened := len(s.modules)
	if err := s.Capture(p2); err != nil {
		t.Fatal(err)
	}
	if _, ok := s.procs[p1]; ok || len(s.procs) != 1 {
		t.Errorf("after capturing 2 processes with MaxProcesses 1: %d kept, first kept %v", len(s.procs), ok)
	}
	if len(s.modules) != opened {
		t.Errorf("%d modules open for two processes of one binary, want %d (shared)", len(s.modules), opened)
	}
	for _, m := range s.modules {
		if m.refs <= 0 {
			t.Errorf("module %s open with %d references", m.path, m.refs)
		}
	}
	frames, err := s.User(p1, runtimeAddrs(t, int(p1), bin, 0, "slow"))
	if err != nil || frames[0].Function != "slow" {
		t.Errorf("evicted live process: %+v, %v; want it captured again", frames, err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	if after := fds(); after != before {
		t.Errorf("%d file descriptors open after Close, %d before New", after, before)
	}
}

// TestMemfdJIT symbolizes code a JIT mapped from a memfd: the mapping is
// file-backed but not ELF, and the names are in the perf map.
func TestMemfdJIT(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "memfdjit")
	buildC(t, bin, filepath.Join("testdata", "memfdjit.c"))
	cmd := exec.Command(bin)
	stdin, _ := cmd.StdinPipe()
	stdout, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { stdin.Close(); cmd.Process.Kill(); cmd.Wait() })
	var base uint64
	if _, err := fmt.Fscanf(bufio.NewReader(stdout), "%x\n", &base); err != nil {
		t.Fatal(err)
	}
	pid := cmd.Process.Pid
	perf := fmt.Sprintf("/tmp/perf-%d.map", pid)
	if err := os.WriteFile(perf, []byte(fmt.Sprintf("%x 40 Interpreter::Run\n", base+0x100)), 0o644); err != nil {
		t.Fatal(err)
	}
	defer os.Remove(perf)
	s := New(Config{})
	defer s.Close()
	if err := s.Capture(uint32(pid)); err != nil {
		t.Fatal(err)
	}
	frames, err := s.User(uint32(pid), []uint64{base + 0x110, base + 0x200})
	if err != nil {
		t.Fatal(err)
	}
	want := []snapshot.Frame{
		{Addr: base + 0x110, Function: "Interpreter::Run", Module: "memfd:jit", Offset: 0x110},
		{Addr: base + 0x200, Module: "memfd:jit", Offset: 0x200},
	}
	for i := range want {
		if frames[i] != want[i] {
			t.Errorf("frame %d = %+v, want %+v", i, frames[i], want[i])
		}
	}
}

func TestReplaced(t *testing.T) {
	path := filepath.Join(t.TempDir(), "bin")
	if err := os.WriteFile(path, []byte("x"), 0o755); err != nil {
		t.Fatal(err)
	}
	f, err := userfile.OpenPath(context.Background(), path, userfile.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	st := f.Info
	dev := uint64(unix.Major(st.Dev))<<32 | uint64(unix.Minor(st.Dev))
	for _, tc := range []struct {
		name string
		r    mapRegion
		want bool
	}{
		{"same file", mapRegion{dev: dev, inode: st.Ino}, false},
		{"same device, other inode: replaced", mapRegion{dev: dev, inode: st.Ino + 1}, true},
		{"other device (an overlay's layer): cannot tell", mapRegion{dev: dev + 1, inode: st.Ino + 1}, false},
	} {
		if got := replaced(f.Info, tc.r); got != tc.want {
			t.Errorf("%s: replaced = %v, want %v", tc.name, got, tc.want)
		}
	}
}

// TestConcurrent symbolizes from several goroutines at once (run it with
// -race): the collector's reader and a stacks exporter may share one
// Symbolizer.
func TestConcurrent(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "cprog")
	buildC(t, bin, filepath.Join("testdata", "cprog.c"))
	cmd, stdin := startBlocked(t, bin)
	defer stdin.Close()
	pid := uint32(cmd.Process.Pid)
	addrs := runtimeAddrs(t, int(pid), bin, 1, "slow", "c", "b", "a", "main")
	self := uint32(os.Getpid())
	s := New(Config{})
	defer s.Close()
	errs := make(chan error, 8)
	for g := range 8 {
		go func() {
			for i := range 50 {
				p := pid
				if (g+i)%2 == 0 {
					p = self
				}
				if err := s.Capture(p); err != nil {
					errs <- err
					return
				}
				frames, err := s.User(pid, addrs)
				if err != nil || frames[2].Function != "b" {
					errs <- fmt.Errorf("goroutine %d: %+v, %v", g, frames[2], err)
					return
				}
				s.Kernel([]uint64{0xffffffff81000010})
			}
			errs <- nil
		}()
	}
	for range 8 {
		if err := <-errs; err != nil {
			t.Error(err)
		}
	}
}
