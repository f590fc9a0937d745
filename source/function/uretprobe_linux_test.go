//go:build linux

package function

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/spanwatch/spanwatch/collector"
	"github.com/spanwatch/spanwatch/internal/glob"
)

// needUretprobeHost skips unless the test can load BPF and attach
// uprobes.
func needUretprobeHost(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root (CAP_BPF, CAP_PERFMON, CAP_SYS_ADMIN) to load BPF and attach uprobes")
	}
}

// TestUretprobeExactCounts is TestExactCounts with returns: uretprobe:
// a function with five return instructions, a recursive one (6 calls
// nested on the stack, 41 every tenth time, under the kernel's 64 pending
// uretprobes; each return seen with the stack pointer 8 past the
// entry's) and a budget's slow calls, exact counts and no counter.
// Pairing at the uretprobe by the stack pointer as the return
// instruction sees it (not 8 back) finds no entry: every return is
// unpaired and there are no spans.
func TestUretprobeExactCounts(t *testing.T) {
	needUretprobeHost(t)
	testExactCounts(t, ReturnsUretprobe)
}

// TestUretprobeLongjmp is TestLongjmp with returns: uretprobe: the
// kernel drops the return instances a longjmp skips, so their entries
// stay open until a call at the same place replaces them; exact span
// counts per function, no surplus over budget (no wrong pair), no
// unpaired return, and the replacements between the abandoned calls
// and that less one per thread and function.
func TestUretprobeLongjmp(t *testing.T) {
	needUretprobeHost(t)
	testUnwindReturns(t, "gcc", "longjmp.c", []string{"leaf", "mid", "top"}, ReturnsUretprobe)
}

// TestUretprobeParamsC is TestParamsC's traced run with returns:
// uretprobe, from a rule file: labels by parameter name read at the
// entry and kept with the call, an error predicate over eax read at the
// uretprobe (the registers after the return), exact counts per label
// set. An error read from the wrong registers gives errors where there
// are none, or none where there are.
func TestUretprobeParamsC(t *testing.T) {
	needUretprobeHost(t)
	prog := cProgram(t, "paramsprog")
	got, counts, overruns := runArgs(t, prog, fmt.Sprintf(`- binary: %s
  function: handle
  returns: uretprobe
  labels: {status: {param: code}, route: {param: path}}
  error: ret.s32 == -1
`, prog), "handle", []string{"status", "route"})
	checkArgs(t, got, wantArgs("status", "route"))
	checkNoCounts(t, counts)
	// After the return the user stack starts at the caller.
	if len(overruns) == 0 || len(overruns[0].UserStack) == 0 || overruns[0].UserStack[0].Function != "main" {
		t.Errorf("overruns %d, want the first's user stack to start at main", len(overruns))
	}
}

// TestUretprobeGoRefused: returns: uretprobe on a Go binary (this test's
// own) is refused at the returns: key when the rule file is decoded, and
// by Attach, which has nothing attached.
func TestUretprobeGoRefused(t *testing.T) {
	needUretprobeHost(t)
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "rules.yaml")
	_, err = decode(t, file, fmt.Sprintf("- binary: %s\n  function: main.main\n  returns: uretprobe\n", exe))
	if err == nil || !strings.Contains(err.Error(), file+":3:12: "+exe+": returns: uretprobe on a Go binary") {
		t.Errorf("decode: %v, want an error at %s:3:12 refusing a Go binary", err, file)
	}

	c, err := collector.New(context.Background(), collector.Config{Sources: collector.Sources{Marker: true}, ScanInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	g, err := glob.Compile("main.main")
	if err != nil {
		t.Fatal(err)
	}
	s, err := Attach(context.Background(), c.SourceCore(), []Target{{Binary: exe, Functions: g, Returns: ReturnsUretprobe}})
	if err == nil {
		s.Close()
		t.Fatal("attached returns: uretprobe to a Go binary")
	}
	if want := "functions of " + exe + ": " + errUretprobeGo.Error(); err.Error() != want {
		t.Errorf("attach: %v, want %s", err, want)
	}
}

// TestDecodeReturns: returns: uretprobe and instructions decode on a C
// binary; another value is an error at its position.
func TestDecodeReturns(t *testing.T) {
	cc, err := exec.LookPath("cc")
	if err != nil {
		t.Skip("no C compiler (cc) on PATH: install build-essential")
	}
	dir := t.TempDir()
	prog := filepath.Join(dir, "callprog")
	if out, err := exec.Command(cc, "-O2", "-pthread", "-o", prog, "testdata/callprog.c").CombinedOutput(); err != nil {
		t.Fatalf("cc: %v: %s", err, out)
	}
	file := filepath.Join(dir, "rules.yaml")
	for _, r := range []Returns{ReturnsUretprobe, ReturnsInstructions} {
		got, err := decode(t, file, fmt.Sprintf("- {binary: callprog, function: multi_ret, returns: %s}\n", r))
		if err != nil || len(got) != 1 || got[0].Returns != r {
			t.Errorf("returns: %s: decoded %+v, %v", r, got, err)
		}
	}
	_, err = decode(t, file, "- {binary: callprog, function: multi_ret, returns: uretprobes}\n")
	if err == nil || !strings.Contains(err.Error(), file+":1:52: returns must be instructions") {
		t.Errorf("returns: uretprobes: %v, want an error at %s:1:52", err, file)
	}
}

// TestExceptionTables: a g++ program that throws (testdata/throw.cc) has
// a .gcc_except_table section and imports __gxx_personality_v0 and
// __cxa_throw (libstdc++'s, which calls _Unwind_RaiseException), so returns:
// uretprobe warns on it; a C program (testdata/callprog.c) has none.
func TestExceptionTables(t *testing.T) {
	gxx, err := exec.LookPath("g++")
	if err != nil {
		t.Skip("no g++ on PATH: install g++")
	}
	dir := t.TempDir()
	cxx, c := filepath.Join(dir, "throw"), filepath.Join(dir, "callprog")
	if out, err := exec.Command(gxx, append(append([]string{}, debianFlags...), "-pthread", "-o", cxx, "testdata/throw.cc")...).CombinedOutput(); err != nil {
		t.Fatalf("g++: %v: %s", err, out)
	}
	if out, err := exec.Command("gcc", "-O2", "-pthread", "-o", c, "testdata/callprog.c").CombinedOutput(); err != nil {
		t.Fatalf("gcc: %v: %s", err, out)
	}
	for _, tc := range []struct {
		path string
		want []string
	}{
		{cxx, []string{"a .gcc_except_table section", "the dynamic symbol __gxx_personality_v0", "the dynamic symbol __cxa_throw"}},
		{c, nil},
	} {
		f, err := os.Open(tc.path)
		if err != nil {
			t.Fatal(err)
		}
		got := exceptionTables(f)
		f.Close()
		if fmt.Sprint(got) != fmt.Sprint(tc.want) {
			t.Errorf("%s: %q, want %q", filepath.Base(tc.path), got, tc.want)
		}
	}
}
