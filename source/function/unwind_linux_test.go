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
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/spanwatch/spanwatch/collector"
	"github.com/spanwatch/spanwatch/internal/glob"
	"github.com/spanwatch/spanwatch/snapshot"
)

// debianFlags are what dpkg-buildflags gives C and C++ on Debian 12
// (bookworm), less the file-prefix map: the calls these tests abandon
// must be abandoned in code built the way a distribution builds it
// (gcc's defaults there add PIE).
var debianFlags = []string{"-O2", "-g", "-fstack-protector-strong", "-Wformat", "-Werror=format-security"}

// The unwinding programs' shape: threads each making calls top() calls,
// one in 100 sleeping unwindSleep and returning, two in 100 sleeping and
// then abandoning their frames (testdata/longjmp.c, testdata/throw.cc).
const (
	unwindThreads = 32
	unwindCalls   = 600
	unwindSleep   = 200 * time.Millisecond
	// unwindBudget is under the sleep, so a span holding a sleep is over
	// it, and far over a fast call, so most fast calls are not.
	unwindBudget = 100 * time.Millisecond
)

// TestLongjmp traces a gcc program whose leaf function longjmps, from
// under two traced frames, to a setjmp one or two levels up, on 32
// threads (testdata/longjmp.c).
func TestLongjmp(t *testing.T) {
	testUnwind(t, "gcc", "longjmp.c", []string{"leaf", "mid", "top"})
}

// TestCxxExceptions traces a g++ program whose leaf function throws
// through traced frames that run destructors on the way, caught one
// level up or three, on 32 threads (testdata/throw.cc).
func TestCxxExceptions(t *testing.T) {
	testUnwind(t, "g++", "throw.cc", []string{"leaf", "b", "a", "top"})
}

// unwindCount is one function's line of the program's report: its calls
// that returned, those of them that slept, those the program timed at the
// budget or more, and its calls abandoned.
type unwindCount struct{ returned, slept, over, abandoned uint64 }

// testUnwind builds src with compiler, traces fns with a budget of
// unwindBudget on each, runs the program, and checks the spans against
// the calls the program counted. Each assertion and why it can fail:
//
//   - spans of a function = its normal returns: an abandoned call that
//     became a span (paired with a later return) adds one, a return that
//     found no entry (its entry replaced or evicted, or a return site
//     internal/funcs missed, such as one in a landing pad) takes one.
//   - spans over budget, between the normal returns that slept and those
//     the program timed at the budget or more: a call that slept holds
//     its sleep, longer than the budget, inside its span; the program's
//     time of a call brackets its span (taken before the call and after
//     it returns), so a span over budget was timed over budget too,
//     unless it is a wrong pair. The abandoned calls
//     slept unwindSleep before the longjmp or throw, so an abandoned entry
//     paired with any later return at the same place makes a span at
//     least unwindSleep long, over the budget, for a call the program
//     timed fast: a surplus. The program's times, not the calls that
//     slept, are the reference, because on a loaded machine a fast call
//     preempted among 32 busy threads can take over 100 ms (seen: 100-124
//     ms, load average 7).
//   - no unpaired return: every normal return had its entry.
//   - replaced <= abandoned: only an abandoned entry is left for a later
//     call at the same place to replace; more would mean a live call's
//     entry was overwritten (then its return would pair with the newer
//     entry, a wrong pair). And replaced >= abandoned - threads*functions:
//     each thread calls each function from one place, and ends on fast
//     calls, so at most one abandoned entry per thread and function is
//     never replaced; fewer replacements would mean abandoned entries
//     vanished unseen (evicted) or were paired.
//   - the program exits 0: the uprobes on return instructions did not
//     disturb the unwinding (a uretprobe rewrites return addresses, which
//     the unwinder and longjmp's checks read).
func testUnwind(t *testing.T, compiler, src string, fns []string) {
	testUnwindReturns(t, compiler, src, fns, ReturnsInstructions)
}

// testUnwindReturns is testUnwind with the returns seen as returns says.
func testUnwindReturns(t *testing.T, compiler, src string, fns []string, returns Returns) {
	if os.Geteuid() != 0 {
		t.Skip("needs root (CAP_BPF, CAP_PERFMON, CAP_SYS_ADMIN) to load BPF and attach uprobes")
	}
	if testing.Short() {
		t.Skip("-short: the program sleeps about 4 s")
	}
	var prog string
	if compiler == "gcc" {
		// test/vm/cprograms.txt builds it with debianFlags, for the VM
		// too (it has no compiler).
		prog = cProgram(t, strings.TrimSuffix(src, filepath.Ext(src)))
	} else {
		cc, err := exec.LookPath(compiler)
		if err != nil {
			t.Skipf("no %s on PATH: install %s", compiler, compiler)
		}
		prog = filepath.Join(t.TempDir(), strings.TrimSuffix(src, filepath.Ext(src)))
		args := append(append([]string{}, debianFlags...), "-pthread", "-o", prog, filepath.Join("testdata", src))
		if out, err := exec.Command(cc, args...).CombinedOutput(); err != nil {
			t.Fatalf("%s %v: %v: %s", compiler, args, err, out)
		}
	}

	c, err := collector.New(context.Background(), collector.Config{Sources: collector.Sources{Marker: true}, ScanInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()

	cmd := exec.Command(prog, strconv.Itoa(unwindThreads), strconv.Itoa(unwindCalls),
		strconv.Itoa(int(unwindSleep/time.Millisecond)), strconv.Itoa(int(unwindBudget/time.Millisecond)))
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

	var targets []Target
	var budgets []collector.BudgetRule
	for _, fn := range fns {
		g, err := glob.Compile(fn)
		if err != nil {
			t.Fatal(err)
		}
		// Span names of their own: the C++ functions' demangled names
		// are "leaf(int)" and the like only with parameters.
		targets = append(targets, Target{Binary: prog, Functions: g, Span: "unwind_" + fn, Returns: returns})
		budgets = append(budgets, collector.BudgetRule{Span: "unwind_" + fn, Budget: unwindBudget, NoUserStack: true})
	}
	s, err := Attach(context.Background(), c.SourceCore(), targets)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if tr := s.Traced(); len(tr) != len(fns) {
		t.Fatalf("traced %+v, want %d functions", tr, len(fns))
	}
	for _, tr := range s.Traced() {
		t.Logf("%s: %s at %#x, return sites %#x", tr.Span, tr.Func.DisplayName(), tr.Func.Offset, tr.Func.Returns)
	}
	if err := c.SetBudgets(budgets); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Snapshot(); err != nil { // a fresh window
		t.Fatal(err)
	}
	start := time.Now()
	io.WriteString(stdin, "go\n")
	want := map[string]unwindCount{}
	for out.Scan() && out.Text() != "done" {
		var name string
		var n unwindCount
		if _, err := fmt.Sscan(out.Text(), &name, &n.returned, &n.slept, &n.over, &n.abandoned); err != nil {
			t.Fatalf("program said %q: %v", out.Text(), err)
		}
		want["unwind_"+name] = n
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("program: %v (the tracing broke its unwinding?)", err)
	}
	t.Logf("%d threads x %d calls in %v", unwindThreads, unwindCalls, time.Since(start).Round(time.Millisecond))
	if len(want) != len(fns) {
		t.Fatalf("program reported %v, want %d functions", want, len(fns))
	}

	got := map[string]snapshot.Series{}
	read := func() {
		snap, err := c.Snapshot()
		if err != nil {
			t.Fatal(err)
		}
		for _, sr := range snap.Series {
			x := got[sr.Span]
			x.Count += sr.Count
			x.OverBudget += sr.OverBudget
			got[sr.Span] = x
		}
	}
	complete := func() bool {
		for name, w := range want {
			if got[name].Count < w.returned {
				return false
			}
		}
		return true
	}
	for deadline := time.Now().Add(20 * time.Second); !complete() && time.Now().Before(deadline); {
		read()
		time.Sleep(50 * time.Millisecond)
	}
	time.Sleep(200 * time.Millisecond)
	read() // anything past the expected counts

	var abandoned uint64
	for _, fn := range fns {
		name := "unwind_" + fn
		w, g := want[name], got[name]
		abandoned += w.abandoned
		if g.Count != w.returned {
			t.Errorf("%s: %d spans, want %d (its normal returns; %d calls abandoned)", fn, g.Count, w.returned, w.abandoned)
		}
		if g.OverBudget > w.over || g.OverBudget < w.slept {
			t.Errorf("%s: %d spans over the %v budget, want %d-%d (its normal returns that slept, and those the program timed over it): a surplus is a wrong pair", fn, g.OverBudget, unwindBudget, w.slept, w.over)
		}
		t.Logf("%s: %d spans (want %d), %d over budget (want %d-%d), %d abandoned", fn, g.Count, w.returned, g.OverBudget, w.slept, w.over, w.abandoned)
	}
	counts, err := s.Counts()
	if err != nil {
		t.Fatal(err)
	}
	if n := counts["functions/unpaired"]; n != 0 {
		t.Errorf("%d unpaired returns, want 0", n)
	}
	replaced := counts["functions/replaced"]
	if floor := abandoned - min(abandoned, uint64(unwindThreads*len(fns))); replaced > abandoned || replaced < floor {
		t.Errorf("%d entries replaced, want between %d and %d (the abandoned calls, less at most one per thread and function)", replaced, floor, abandoned)
	}
	t.Logf("counters %v; %d calls abandoned", counts, abandoned)
}
