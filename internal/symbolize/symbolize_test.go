package symbolize

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/spanwatch/spanwatch/internal/userfile"
	"github.com/spanwatch/spanwatch/snapshot"
)

func TestParseStat(t *testing.T) {
	// A command name with spaces and parentheses, as the kernel prints it.
	line := "4242 (a (b) c) S 1 4242 4242 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 987654 1000 200 18446744073709551615 94000000000000 94000000100000 140700000000000 0 0 0 0 0 0 0 0 0 17 1 0 0 0 0 0\n"
	k, err := parseStat([]byte(line))
	if err != nil {
		t.Fatal(err)
	}
	want := procKey{startTime: 987654, startCode: 94000000000000, startStack: 140700000000000}
	if k != want {
		t.Errorf("parseStat = %+v, want %+v", k, want)
	}
	for _, bad := range []string{"4242 no paren", "4242 (x) S 1 2"} {
		if _, err := parseStat([]byte(bad)); err == nil {
			t.Errorf("parseStat(%q) succeeded", bad)
		}
	}
}

func TestParseMaps(t *testing.T) {
	in := `55ff155d2000-55ff155d4000 r--p 00000000 fe:00 247026                     /usr/bin/cat
55ff155d4000-55ff155d9000 r-xp 00002000 fe:00 247026                     /usr/bin/cat
7f0000000000-7f0000001000 rwxp 00000000 00:00 0 
7f1000000000-7f1000010000 r-xp 00010000 103:02 99                         /app/lib with space.so (deleted)
7ffd1c3f0000-7ffd1c3f2000 r-xp 00000000 00:00 0                          [vdso]
`
	got, err := parseMaps([]byte(in))
	if err != nil {
		t.Fatal(err)
	}
	want := []mapRegion{
		{start: 0x55ff155d4000, end: 0x55ff155d9000, offset: 0x2000, exec: true, dev: 0xfe<<32 | 0, inode: 247026, path: "/usr/bin/cat"},
		{start: 0x7f0000000000, end: 0x7f0000001000, exec: true},
		{start: 0x7f1000000000, end: 0x7f1000010000, offset: 0x10000, exec: true, dev: 0x103<<32 | 2, inode: 99, path: "/app/lib with space.so (deleted)"},
		{start: 0x7ffd1c3f0000, end: 0x7ffd1c3f2000, exec: true, path: "[vdso]"},
	}
	if len(got) != len(want) {
		t.Fatalf("got %d regions, want %d: %+v", len(got), len(want), got)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("region %d = %+v, want %+v", i, got[i], want[i])
		}
	}
}

func TestParsePerfMapLine(t *testing.T) {
	type entry struct {
		start, end uint64
		name       string
	}
	for _, tc := range []struct {
		line string
		want entry
		ok   bool
	}{
		{"7f0000001000 40 jit_alpha", entry{0x7f0000001000, 0x7f0000001040, "jit_alpha"}, true},
		{"0x10 0x20 LazyCompile:*beta foo.js:12", entry{0x10, 0x30, "LazyCompile:*beta foo.js:12"}, true},
		{"10 0 empty", entry{}, false},
		{"zz 10 bad", entry{}, false},
		{"10", entry{}, false},
		{"ffffffffffffffff 2 wraps", entry{}, false},
	} {
		e, name, ok := parsePerfMapLine([]byte(tc.line))
		got := entry{e.start, e.end, string(name)}
		if ok != tc.ok || ok && got != tc.want {
			t.Errorf("parsePerfMapLine(%q) = %+v, %v; want %+v, %v", tc.line, got, ok, tc.want, tc.ok)
		}
	}
}

// TestParsePerfMapCaps reads a perf map cut at its size cap and past its
// memory budget: the entries that fit are kept, the caps counted.
func TestParsePerfMapCaps(t *testing.T) {
	var total atomic.Int64
	before := userfile.Counts()
	pm := parsePerfMap([]byte("1000 10 a\n2000 10 b\n3000 10 partial_na"), true, newBudget(1<<20, &total, 1<<20))
	if len(pm.entries) != 2 {
		t.Errorf("%d entries from a cut map, want 2 (the cut line dropped)", len(pm.entries))
	}
	if _, name, ok := pm.lookup(0x2004); !ok || name != "b" {
		t.Errorf("lookup(0x2004) = %q, %v", name, ok)
	}
	// Room for two entries and their names only.
	pm = parsePerfMap([]byte("1000 10 a\n2000 10 b\n3000 10 c\n"), false, newBudget(2*(perfEntrySize+1), &total, 1<<20))
	if len(pm.entries) != 2 {
		t.Errorf("%d entries within a budget for 2", len(pm.entries))
	}
	pm.free()
	after := userfile.Counts()
	if after[userfile.ReasonPerfMapSize] <= before[userfile.ReasonPerfMapSize] || after[userfile.ReasonModuleMemory] <= before[userfile.ReasonModuleMemory] {
		t.Errorf("caps not counted: before %v, after %v", before, after)
	}
}

func TestParseKallsyms(t *testing.T) {
	in := "ffffffff81000000 T _text\nffffffff81001000 T do_one\nffffffff81001100 t do_two\nffffffff81002000 D some_data\nffffffffc0001000 t ext4_thing\t[ext4]\n"
	k, err := parseKallsyms([]byte(in))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		addr         uint64
		name, module string
	}{
		{0xffffffff81001010, "do_one", "kernel"},
		{0xffffffff81001100, "do_two", "kernel"},
		{0xffffffff81002010, "do_two", "kernel"}, // data symbols are not functions
		{0xffffffffc0001004, "ext4_thing", "ext4"},
	} {
		s, ok := k.lookup(tc.addr)
		if !ok || s.name != tc.name || k.moduleName(s) != tc.module {
			t.Errorf("lookup(%#x) = %q in %q (%v), want %q in %q", tc.addr, s.name, k.moduleName(s), ok, tc.name, tc.module)
		}
	}
	hidden := "0000000000000000 T _text\n0000000000000000 T do_one\n"
	if _, err := parseKallsyms([]byte(hidden)); !errors.Is(err, ErrKernelHidden) {
		t.Errorf("zeroed kallsyms: error %v, want ErrKernelHidden", err)
	}
}

func TestKernelHidden(t *testing.T) {
	path := filepath.Join(t.TempDir(), "kallsyms")
	if err := os.WriteFile(path, []byte("0000000000000000 T _text\n0000000000000000 T vfs_read\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	s := New(Config{Kallsyms: path})
	defer s.Close()
	frames, err := s.Kernel([]uint64{0xffffffff81001234})
	if !errors.Is(err, ErrKernelHidden) || !strings.Contains(err.Error(), "CAP_SYSLOG") {
		t.Errorf("error %v, want ErrKernelHidden naming CAP_SYSLOG", err)
	}
	if len(frames) != 1 || frames[0].Addr != 0xffffffff81001234 {
		t.Errorf("frames %+v, want the address kept", frames)
	}
}

func TestHint(t *testing.T) {
	for _, tc := range []struct {
		name   string
		frames []snapshot.Frame
		want   string // substring; "" for no hint
	}{
		{"go", []snapshot.Frame{{Function: "main.slow"}, {Function: "main.main"}, {Function: "runtime.main"}, {Function: "runtime.goexit.abi0"}}, ""},
		{"c main then unnamed libc", []snapshot.Frame{{Function: "slow"}, {Function: "main"}, {Module: "libc.so.6", Offset: 0x2724a}}, ""},
		{"thread", []snapshot.Frame{{Function: "work"}, {Function: "start_thread"}, {Function: "__clone3"}}, ""},
		{"short in libc", []snapshot.Frame{{Function: "__GI___libc_write", Module: "libc.so.6"}, {Module: "app", Offset: 0x1234}}, "stops after 2 frames at app+0x1234"},
		{"empty", nil, "empty user stack"},
		{"deep", make([]snapshot.Frame, MaxStackDepth), "truncated at 127"},
		{"inlined frames are not addresses", append(make([]snapshot.Frame, MaxStackDepth-2), snapshot.Frame{Function: "x", Inlined: true}, snapshot.Frame{Function: "y"}), "stops after 126 frames"},
		{"short with inlined", []snapshot.Frame{{Function: "f", Inlined: true}, {Function: "g"}}, "stops after 1 frame at g"},
	} {
		got := Hint(tc.frames)
		if (tc.want == "") != (got == "") || !strings.Contains(got, tc.want) {
			t.Errorf("%s: Hint = %q, want %q", tc.name, got, tc.want)
		}
	}
}

// TestBudget: a file's budget within its cap and the symbolizer's total,
// granting what fits and counting each cap once per file.
func TestBudget(t *testing.T) {
	var total atomic.Int64
	a := newBudget(100, &total, 150)
	if !a.take(60) || a.take(41) {
		t.Fatal("take: 60 fits a 100 cap, 41 more does not")
	}
	if g := a.grant(60); g != 40 {
		t.Errorf("grant(60) = %d, want the 40 left of the file's cap", g)
	}
	b := newBudget(100, &total, 150)
	if g := b.grant(80); g != 50 {
		t.Errorf("grant(80) = %d, want the 50 left of the total", g)
	}
	if g := b.grant(1); g != 0 {
		t.Errorf("grant(1) with nothing left = %d", g)
	}
	if caps := a.caps(); len(caps) != 1 || caps[0] != userfile.ReasonModuleMemory {
		t.Errorf("a's caps %v", caps)
	}
	if caps := b.caps(); len(caps) != 1 || caps[0] != userfile.ReasonMemory {
		t.Errorf("b's caps %v", caps)
	}
	a.release()
	b.give(20)
	if total.Load() != 30 || b.bytes() != 30 {
		t.Errorf("total %d, b %d; want 30, 30", total.Load(), b.bytes())
	}
	b.release()
	if total.Load() != 0 {
		t.Errorf("total %d after release", total.Load())
	}
}
