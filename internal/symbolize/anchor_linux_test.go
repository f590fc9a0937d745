//go:build linux

package symbolize

import (
	"debug/elf"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/spanwatch/spanwatch/snapshot"
)

// symAddr returns the address of a function symbol in bin (plus off).
func symAddr(t *testing.T, bin, name string, off uint64) uint64 {
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
	for _, s := range syms {
		if s.Name == name {
			return s.Value + off
		}
	}
	t.Fatalf("%s: no symbol %s", bin, name)
	return 0
}

// retAddr returns the address after the first call instruction in fn: the
// return address a stack walk finds for fn's frame.
func retAddr(t *testing.T, bin, fn string) uint64 {
	t.Helper()
	ef, err := elf.Open(bin)
	if err != nil {
		t.Fatal(err)
	}
	defer ef.Close()
	syms, _ := ef.Symbols()
	for _, s := range syms {
		if s.Name != fn {
			continue
		}
		text := ef.Section(".text")
		b, err := text.Data()
		if err != nil {
			t.Fatal(err)
		}
		code := b[s.Value-text.Addr : s.Value-text.Addr+s.Size]
		// -O0 x86-64: the call is e8 rel32 after the prologue; main
		// calls printf and fflush first, so take the last call.
		last := -1
		for i := 0; i+5 <= len(code); i++ {
			if code[i] == 0xe8 {
				last = i
				if fn != "main" {
					break
				}
			}
		}
		if last < 0 {
			t.Fatalf("%s: no call in %s", bin, fn)
		}
		if fn == "main" {
			// main calls a, then returns: find the call whose target is a.
			a := symAddr(t, bin, "a", 0)
			for i := 0; i+5 <= len(code); i++ {
				rel := int32(uint32(code[i+1]) | uint32(code[i+2])<<8 | uint32(code[i+3])<<16 | uint32(code[i+4])<<24)
				if code[i] == 0xe8 && uint64(int64(s.Value)+int64(i)+5+int64(rel)) == a {
					return s.Value + uint64(i) + 5
				}
			}
			t.Fatalf("%s: main does not call a", bin)
		}
		return s.Value + uint64(last) + 5
	}
	t.Fatalf("%s: no symbol %s", bin, fn)
	return 0
}

// TestAnchorExitedProcess symbolizes the stack of a process that was never
// captured (it exited first) from the binary its probe is in: the stack's
// first frame is the probe site, whose address in the file gives the load
// bias. The binary is cprog.c built as a PIE (loaded anywhere, page
// aligned) and as a fixed-address executable.
func TestAnchorExitedProcess(t *testing.T) {
	lines := markerLines(t, "testdata/cprog.c")
	for _, tc := range []struct {
		name  string
		flags []string
		bias  uint64
	}{
		{"pie", []string{"-pie", "-fPIE"}, 0x55d0c0de0000},
		{"no-pie", []string{"-no-pie", "-fno-PIE"}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cc, err := exec.LookPath("cc")
			if err != nil {
				t.Skipf("skipping: no C compiler: %v", err)
			}
			bin := filepath.Join(t.TempDir(), "cprog")
			run(t, cc, append([]string{"-O0", "-g", "-fno-omit-frame-pointer", "-o", bin, "testdata/cprog.c"}, tc.flags...)...)
			// The probe site: 4 bytes into slow (past its prologue);
			// return addresses: just after each caller's call.
			site := symAddr(t, bin, "slow", 4)
			addrs := []uint64{site + tc.bias}
			for _, fn := range []string{"c", "b", "a", "main"} {
				addrs = append(addrs, retAddr(t, bin, fn)+tc.bias)
			}
			addrs = append(addrs, 0x7f0012345678) // libc: not in the binary

			s := New(Config{})
			defer s.Close()
			const gone = 1 << 30 // no such process
			if _, err := s.User(gone, addrs); err == nil || !strings.Contains(err.Error(), "not captured") {
				t.Fatalf("without an anchor: error %v, want not captured", err)
			}
			// An anchor elsewhere in the file does not fit this stack.
			if err := s.AddAnchor(Anchor{Path: bin, Addr: site + 1}); err != nil {
				t.Fatal(err)
			}
			if frames, _ := s.User(gone, addrs); frames[0].Function != "" {
				t.Fatalf("an anchor 1 byte off named %v", frames[0])
			}
			if err := s.AddAnchor(Anchor{Path: "/renamed/cprog", Open: bin, Addr: site}); err != nil {
				t.Fatal(err)
			}
			frames, err := s.User(gone, addrs)
			if err == nil || !strings.Contains(err.Error(), "exited before its maps were read") || !strings.Contains(err.Error(), "cprog") {
				t.Errorf("error %v, want it to say the process exited and the frames come from cprog", err)
			}
			var got []string
			for _, f := range frames {
				got = append(got, f.Function)
			}
			if strings.Join(got, ",") != "slow,c,b,a,main," {
				t.Errorf("frames %v, want slow, c, b, a, main and the unnamed libc frame", got)
			}
			// Return addresses name the calling line.
			for _, fn := range []string{"c", "b", "a"} {
				for _, f := range frames {
					if f.Function == fn && f.Line != lines["call:"+fn] {
						t.Errorf("frame %s at line %d, want %d", fn, f.Line, lines["call:"+fn])
					}
				}
			}
			if f := frames[1]; f.Module != "cprog" || f.Offset != addrs[1]-tc.bias || f.BuildID == "" || f.File == "" {
				t.Errorf("frame c = %+v: want module cprog, offset %#x, a build id and a file", f, addrs[1]-tc.bias)
			}
			if f := frames[5]; f.Module != "" || f.Function != "" || f.Addr != addrs[5] {
				t.Errorf("the libc frame = %+v, want the bare address", f)
			}
			if tc.bias != 0 {
				// A fixed-address binary fits only at bias 0, a PIE
				// only at a page-aligned one.
				odd := append([]uint64{site + tc.bias + 8}, addrs[1:]...)
				if frames, _ := s.User(gone, odd); frames[1].Function != "" {
					t.Errorf("a bias that is not page aligned named %v", frames[1])
				}
			}
		})
	}
}

// TestExplainStripped symbolizes a running stripped binary: its internal
// functions have no names, and Explain says what to install, naming the
// Debian package from dpkg's file lists.
func TestExplainStripped(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "cprog")
	buildC(t, bin, "testdata/cprog.c")
	run(t, "strip", "--strip-all", bin)
	info := filepath.Join(dir, "dpkg")
	if err := os.MkdirAll(info, 0o755); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(info, "other.list"), []byte("/usr/bin/other\n"), 0o644)
	os.WriteFile(filepath.Join(info, "shop-server:amd64.list"), []byte("/.\n"+bin+"\n"), 0o644)

	cmd, _ := startBlocked(t, bin)
	pid := uint32(cmd.Process.Pid)
	s := New(Config{DpkgInfo: info})
	defer s.Close()
	if err := s.Capture(pid); err != nil {
		t.Fatal(err)
	}
	ef, err := elf.Open(bin)
	if err != nil {
		t.Fatal(err)
	}
	entry := ef.Entry
	ef.Close()
	start, off := loadBase(t, int(pid), bin)
	// _start, at the entry point: no .symtab, not exported.
	addr := start + entry - entryLoadVaddr(t, bin, off)
	frames, err := s.User(pid, []uint64{addr})
	if err != nil {
		t.Fatal(err)
	}
	if frames[0].Function != "" || frames[0].BuildID == "" {
		t.Fatalf("entry frame %+v: want unnamed with a build id", frames[0])
	}
	why := s.Explain(frames)
	id := frames[0].BuildID
	for _, want := range []string{
		"cprog has no symbol table (stripped) and no debug file",
		"/usr/lib/debug/.build-id/" + id[:2] + "/" + id[2:] + ".debug",
		"apt install shop-server-dbgsym",
	} {
		if !strings.Contains(why, want) {
			t.Errorf("Explain = %q, want it to contain %q", why, want)
		}
	}
	// Named frames, and binaries with symbols, need no explanation.
	if got := s.Explain([]snapshot.Frame{{Function: "main", BuildID: id}}); got != "" {
		t.Errorf("Explain of a named frame = %q", got)
	}
}

// entryLoadVaddr returns the virtual address of the loadable segment that
// holds file offset off (the executable mapping maps.txt shows).
func entryLoadVaddr(t *testing.T, bin string, off uint64) uint64 {
	t.Helper()
	ef, err := elf.Open(bin)
	if err != nil {
		t.Fatal(err)
	}
	defer ef.Close()
	for _, p := range ef.Progs {
		if p.Type == elf.PT_LOAD && off >= p.Off && off < p.Off+p.Filesz {
			return p.Vaddr - (p.Off - off)
		}
	}
	t.Fatalf("no segment at offset %#x", off)
	return 0
}

// TestExplainDebianBinary does the same with a binary Debian installed
// (/usr/bin/sleep, stripped by the package build) and the real dpkg
// database: the explanation names coreutils.
func TestExplainDebianBinary(t *testing.T) {
	const bin = "/usr/bin/sleep"
	ef, err := elf.Open(bin)
	if err != nil {
		t.Skipf("skipping: %v", err)
	}
	entry, hasSymtab := ef.Entry, ef.Section(".symtab") != nil
	ef.Close()
	if hasSymtab {
		t.Skipf("skipping: %s has a symbol table here", bin)
	}
	if _, err := os.Stat("/var/lib/dpkg/info/coreutils.list"); err != nil {
		t.Skipf("skipping: not a Debian system: %v", err)
	}
	cmd := exec.Command(bin, "30")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	pid := cmd.Process.Pid
	s := New(Config{})
	defer s.Close()
	var start, off uint64
	for i := 0; i < 100 && start == 0; i++ {
		if b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/maps", pid)); strings.Contains(string(b), bin) {
			start, off = loadBase(t, pid, bin)
		}
	}
	if err := s.Capture(uint32(pid)); err != nil {
		t.Fatal(err)
	}
	frames, err := s.User(uint32(pid), []uint64{start + entry - entryLoadVaddr(t, bin, off)})
	if err != nil {
		t.Fatal(err)
	}
	if frames[0].Function != "" {
		t.Skipf("skipping: %s's entry is named (%s): debug symbols are installed", bin, frames[0].Function)
	}
	if why := s.Explain(frames); !strings.Contains(why, "sleep has no symbol table") || !strings.Contains(why, "apt install coreutils-dbgsym") {
		t.Errorf("Explain = %q, want it to name coreutils-dbgsym", why)
	}
}

//go:noinline
func anchoredFrame() uintptr {
	pc, _, _, _ := runtime.Caller(0)
	return pc
}

// TestAnchorSharedWithExitingProcess captures a process whose maps were
// read but whose files could no longer be opened (it exited in between:
// a fake /proc with stat, status and maps but no map_files or root). The
// mapped binary is anchored, so the process's mapping shares the anchor's
// module and its frames are named; the binary is opened once.
func TestAnchorSharedWithExitingProcess(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	root := t.TempDir()
	const pid = 4242
	dir := filepath.Join(root, fmt.Sprint(pid))
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"stat", "status", "maps"} {
		b, err := os.ReadFile("/proc/self/" + name)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	pc := uint64(anchoredFrame())
	for _, anchored := range []bool{false, true} {
		s := New(Config{ProcRoot: root})
		if anchored {
			if err := s.AddAnchor(Anchor{Path: exe, Addr: pc}); err != nil {
				t.Fatal(err)
			}
		}
		frames, err := s.User(pid, []uint64{pc})
		if anchored && err != nil {
			t.Errorf("anchored: %v", err)
		}
		if !anchored && (err == nil || !strings.Contains(err.Error(), "frames in symbolize.test have no names: the file could not be opened")) {
			t.Errorf("unanchored: error %v, want it to say the file could not be opened", err)
		}
		got := frames[0].Function
		if want := "github.com/spanwatch/spanwatch/internal/symbolize.anchoredFrame"; anchored && got != want {
			t.Errorf("anchored: frame %+v, want %s", frames[0], want)
		}
		if !anchored && got != "" {
			// Without the anchor nothing could open the file: the fake
			// /proc must really leave it unopenable.
			t.Errorf("unanchored: frame %+v named, want it unnamed (the test's /proc lets the file be opened)", frames[0])
		}
		if anchored {
			s.mu.Lock()
			n := len(s.modules)
			var refs int
			for _, m := range s.modules {
				refs = m.refs
			}
			s.mu.Unlock()
			if n != 1 || refs != 2 {
				t.Errorf("%d modules, refs %d: want the anchor and the process to share one module (2 refs)", n, refs)
			}
		}
		s.Close()
	}
}
