//go:build linux

package function

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/spanwatch/spanwatch/collector"
	"github.com/spanwatch/spanwatch/internal/bpftest"
	"github.com/spanwatch/spanwatch/internal/glob"
	"github.com/spanwatch/spanwatch/internal/srcspec"
	"github.com/spanwatch/spanwatch/snapshot"
)

// argsCalls is how many calls the args programs make: every (status,
// route) pair of their 3 statuses and 3 routes is called argsCalls/9
// times.
const argsCalls = 9000

// longRoute is the programs' third route; a string label keeps its first
// StringLabelLen bytes.
const longRoute = "/a/route/longer/than/the/sixty-four/bytes/a/string/label/keeps/xxxxxx"

// argSeries is a label set's spans and errors summed over the windows.
type argSeries struct{ count, errors uint64 }

// runArgs decodes rules (a functions: list naming prog) as check does,
// attaches it, runs prog with argsCalls, and returns the spans of span
// per label set ("status=200 route=/cart"), and the source's counters.
func runArgs(t *testing.T, prog, rules, span string, labels []string) (map[string]argSeries, map[string]uint64, []snapshot.Overrun) {
	t.Helper()
	got, counts, overruns, _ := runArgsIn(t, filepath.Dir(prog), []string{prog}, func(int) string { return rules }, span, labels)
	return got, counts, overruns
}

// runArgsIn is runArgs for a program started as argv (with argsCalls
// after it), its rules written once its pid is known, in the directory
// dir. It returns the functions traced too.
func runArgsIn(t *testing.T, dir string, argv []string, rules func(pid int) string, span string, labels []string) (map[string]argSeries, map[string]uint64, []snapshot.Overrun, []Traced) {
	t.Helper()
	c, err := collector.New(context.Background(), collector.Config{Sources: collector.Sources{Marker: true}, ScanInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	cmd := exec.Command(argv[0], append(argv[1:], strconv.Itoa(argsCalls))...)
	stdin, _ := cmd.StdinPipe()
	stdout, _ := cmd.StdoutPipe()
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	out := bufio.NewScanner(stdout)
	if !out.Scan() || out.Text() != "ready" {
		t.Fatalf("program said %q, want ready", out.Text())
	}
	targets, err := decode(t, filepath.Join(dir, "rules.yaml"), rules(cmd.Process.Pid))
	if err != nil {
		t.Fatal(err)
	}
	s, err := Attach(context.Background(), c.SourceCore(), targets)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	traced := s.Traced()
	// A budget every call exceeds: overrun records, their user stacks
	// taken at a return instruction.
	if err := c.SetBudgets([]collector.BudgetRule{{Span: span, Budget: time.Nanosecond}}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Snapshot(); err != nil {
		t.Fatal(err)
	}
	io.WriteString(stdin, "go\n")
	if !out.Scan() || !strings.HasPrefix(out.Text(), "done") {
		t.Fatalf("program said %q, want done", out.Text())
	}
	if err := cmd.Wait(); err != nil {
		t.Fatal(err)
	}
	got := map[string]argSeries{}
	var overruns []snapshot.Overrun
	total := uint64(0)
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline) && total < argsCalls; {
		snap, err := c.Snapshot()
		if err != nil {
			t.Fatal(err)
		}
		for _, sr := range snap.Series {
			if sr.Span != span {
				continue
			}
			var key []string
			for _, l := range labels {
				key = append(key, l+"="+sr.SourceLabels[l])
			}
			x := got[strings.Join(key, " ")]
			x.count += sr.Count
			x.errors += sr.Errors
			got[strings.Join(key, " ")] = x
			total += sr.Count
		}
		overruns = append(overruns, snap.Overruns...)
		time.Sleep(50 * time.Millisecond)
	}
	counts, err := s.Counts()
	if err != nil {
		t.Fatal(err)
	}
	return got, counts, overruns, traced
}

// checkCaller checks that overruns' user stacks start with the traced
// function and then its caller: at a return instruction the frame
// pointer is already the caller's, and without the return address read
// from the stack's top (bpf/aggregate.h, ustack_at_return) a walk by
// frame pointers skips the caller (and, in a gcc -O2 program without
// frame pointers, stops at the traced function). Fails when the caller
// is missing, or in any other place than second.
func checkCaller(t *testing.T, overruns []snapshot.Overrun, fn, caller string) {
	t.Helper()
	if len(overruns) == 0 {
		t.Fatal("no overrun record: want user stacks to check")
	}
	bad := 0
	for _, o := range overruns {
		var frames []string
		for _, f := range o.UserStack {
			frames = append(frames, f.Function)
		}
		if len(frames) < 2 || frames[0] != fn || frames[1] != caller {
			if bad++; bad <= 3 {
				t.Errorf("overrun user stack %v; want %s, then %s", frames, fn, caller)
			}
		}
	}
	var first []string
	for _, f := range overruns[0].UserStack {
		first = append(first, f.Function)
	}
	t.Logf("%d overrun records, %d without %s then %s; the first's stack: %v", len(overruns), bad, fn, caller, first)
}

// wantArgs is the spans each label set must have: argsCalls/9 calls per
// (status, route), all errors for the 503s and none for the others.
func wantArgs(status, route string) map[string]argSeries {
	want := map[string]argSeries{}
	for _, st := range []string{"200", "404", "503"} {
		for _, r := range []string{"/checkout", "/cart", longRoute[:StringLabelLen]} {
			x := argSeries{count: argsCalls / 9}
			if st == "503" {
				x.errors = argsCalls / 9
			}
			want[status+"="+st+" "+route+"="+r] = x
		}
	}
	return want
}

// checkArgs compares the label sets got with want, exactly.
func checkArgs(t *testing.T, got, want map[string]argSeries) {
	t.Helper()
	var keys []string
	for k := range got {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		t.Logf("%s: %d spans, %d errors", k, got[k].count, got[k].errors)
	}
	for k, w := range want {
		if g := got[k]; g != w {
			t.Errorf("%s: %d spans, %d errors; want %d and %d", k, g.count, g.errors, w.count, w.errors)
		}
	}
	for k, g := range got {
		if _, ok := want[k]; !ok {
			t.Errorf("%s: %d spans, %d errors; want no such label set", k, g.count, g.errors)
		}
	}
}

// checkNoCounts wants no counter: every label read and admitted, every
// call paired.
func checkNoCounts(t *testing.T, counts map[string]uint64) {
	t.Helper()
	if len(counts) != 0 {
		t.Errorf("counters %v, want none (every label read and admitted, every call paired)", counts)
	}
}

// TestArgsC traces handle(int status, const char *route) of a gcc -O2
// program, labelled by status (arg0.s32, the System V ABI's rdi) and
// route (a C string at rsi), its error the -1 it returns for a 503
// (ret.s32 == -1, eax). Each assertion can fail: a label read from the
// wrong register gives other values (or "other" past the cap), the upper
// half of rdi or rax taken as part of the int gives other values or no
// errors, a string read wrong (or cut at other than 64 bytes, or its hash
// named by another string) gives other routes, labels kept with the wrong
// open call (or read at the return, where rdi and rsi are gone) give
// wrong counts per set, and an error predicate over the wrong register
// gives errors where there are none.
func TestArgsC(t *testing.T) {
	bpftest.RequireRoot(t)
	prog := cProgram(t, "argsprog")
	got, counts, overruns := runArgs(t, prog, fmt.Sprintf(`- binary: %s
  function: handle
  labels: {status: arg0.s32, route: {ptr: arg1}}
  error: ret.s32 == -1
`, prog), "handle", []string{"status", "route"})
	checkArgs(t, got, wantArgs("status", "route"))
	checkNoCounts(t, counts)
	checkCaller(t, overruns, "handle", "main")
}

// TestArgsGo traces handle(code int, path string) (int, error) of a Go
// program built by the test, labelled by code (arg0, rax in Go's
// register ABI) and path (a Go string: its pointer in rbx, arg1, and its
// length in rcx, arg2), its error a non-nil error result (ret1 != 0: the
// error interface's type word, rbx, after the int in rax). Each
// assertion can fail: the System V registers in place of Go's give other
// codes and paths, a string read to a NUL instead of its length runs
// into the next string's bytes (Go's strings are not NUL-terminated), an
// error predicate over ret0 (the int) marks the 200s and 404s, and
// pairing or keeping labels wrong gives wrong counts per set.
func TestArgsGo(t *testing.T) {
	bpftest.RequireRoot(t)
	prog := goProgram(t, "argsgo")
	got, counts, overruns := runArgs(t, prog, fmt.Sprintf(`- binary: %s
  function: main.handle
  labels: {code: arg0, path: {ptr: arg1, len: arg2}}
  error: ret1 != 0
`, prog), "main.handle", []string{"code", "path"})
	checkArgs(t, got, wantArgs("code", "path"))
	checkNoCounts(t, counts)
	checkCaller(t, overruns, "main.handle", "main.serve")
}

// TestArgsCap: with label_cap: 2 each label keeps the first two values
// the single-threaded C program passes (statuses 200 and 404, routes
// /checkout and /cart, in its call order) and keys the third "other";
// the 503s stay errors under "other", and every call keyed other is
// counted (3,000 statuses and 3,000 routes). Fails if values are
// admitted past the cap, if a string past the cap names a series, or if
// calls are lost or counted in the wrong set.
func TestArgsCap(t *testing.T) {
	bpftest.RequireRoot(t)
	prog := cProgram(t, "argsprog")
	got, counts, _ := runArgs(t, prog, fmt.Sprintf(`- binary: %s
  function: handle
  labels: {status: arg0.s32, route: {ptr: arg1}}
  label_cap: 2
  error: ret.s32 == -1
`, prog), "handle", []string{"status", "route"})
	want := map[string]argSeries{}
	for _, st := range []string{"200", "404", "other"} {
		for _, r := range []string{"/checkout", "/cart", "other"} {
			x := argSeries{count: argsCalls / 9}
			if st == "other" {
				x.errors = argsCalls / 9
			}
			want["status="+st+" route="+r] = x
		}
	}
	checkArgs(t, got, want)
	if counts["functions/label_other"] != 2*argsCalls/3 || len(counts) != 1 {
		t.Errorf("counters %v; want functions/label_other %d and nothing else", counts, 2*argsCalls/3)
	}
}

// TestParamsC traces handle(int code, const char *path, long n) of
// paramsprog.c built with gcc -O2 -g, labelled by parameter name ({param:
// code}, {param: path}): DWARF places code in rdi as a 32-bit signed int
// and path in rsi as a C string, so the label sets and counts are
// TestArgsC's exactly; a name placed in the wrong register, or with the
// wrong size or signedness, gives other values. Attaching the same
// labels to the program built without -g, or to a parameter that
// follows a struct by value, fails, naming the function, the binary and
// why.
func TestParamsC(t *testing.T) {
	bpftest.RequireRoot(t)
	prog := cProgram(t, "paramsprog")
	got, counts, _ := runArgs(t, prog, fmt.Sprintf(`- binary: %s
  function: handle
  labels: {status: {param: code}, route: {param: path}}
  error: ret.s32 == -1
`, prog), "handle", []string{"status", "route"})
	checkArgs(t, got, wantArgs("status", "route"))
	checkNoCounts(t, counts)

	bare := cProgram(t, "paramsprog-nodebug")
	c, err := collector.New(context.Background(), collector.Config{Sources: collector.Sources{Marker: true}, ScanInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for _, tc := range []struct{ bin, fn, param, want string }{
		{bare, "handle", "code", "functions of " + bare + ": no DWARF for handle in " + bare + ": name arguments by position, argN"},
		{prog, "after_pair", "code", "functions of " + prog + ": after_pair in " + prog + ": parameter code: it follows p (struct pair), which is a struct passed by value"},
		{prog, "handle", "status", "functions of " + prog + ": handle in " + prog + " has no parameter status"},
	} {
		g, err := glob.Compile(tc.fn)
		if err != nil {
			t.Fatal(err)
		}
		target := Target{Binary: tc.bin, Functions: g,
			Labels:        srcspec.Labels{List: []srcspec.Label{{Name: "status", OperandName: tc.param}}},
			LabelOperands: []Operand{{Param: tc.param, Reg: -1, LenReg: -1, Text: "param " + tc.param}}}
		s, err := Attach(context.Background(), c.SourceCore(), []Target{target})
		if err == nil {
			s.Close()
			t.Errorf("%s %s: attached, want %s", tc.fn, tc.param, tc.want)
			continue
		}
		if !strings.HasPrefix(err.Error(), tc.want) {
			t.Errorf("%s %s: got %v, want %s...", tc.fn, tc.param, err, tc.want)
		}
	}
}

// TestParamsGo traces testdata/argsgo's main.handle(code int, path
// string) (n int, err error) labelled by parameter name, an error by its
// named result (err != 0): DWARF and Go's register ABI place code in rax
// and path in rbx and rcx, err's type word in rbx at the return, so the
// label sets, counts and errors are TestArgsGo's exactly.
func TestParamsGo(t *testing.T) {
	bpftest.RequireRoot(t)
	prog := goProgram(t, "argsgo")
	got, counts, _ := runArgs(t, prog, fmt.Sprintf(`- binary: %s
  function: main.handle
  labels: {code: {param: code}, path: {param: path}}
  error: err != 0
`, prog), "main.handle", []string{"code", "path"})
	checkArgs(t, got, wantArgs("code", "path"))
	checkNoCounts(t, counts)
}
