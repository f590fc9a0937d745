//go:build linux

package function

import (
	"bufio"
	"context"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/spanwatch/spanwatch/collector"
	"github.com/spanwatch/spanwatch/internal/bpftest"
	"github.com/spanwatch/spanwatch/internal/glob"
	"github.com/spanwatch/spanwatch/snapshot"
)

// TestExactCounts traces a gcc -O2 -g program (x86-64, or arm64 in the
// VM)'s functions, one with five
// return instructions and one recursive (6 calls deep, 41 every tenth
// time: past a thread's table of open calls), called on 4 threads, and checks
// every call is one span: exact counts, no unpaired returns, no replaced
// entries; and that a budget on a third catches exactly its slow calls:
// 100 ms, against calls that sleep 200 ms and calls that do not sleep
// (under qemu's TCG, in the VM, a call that does not sleep took over 10
// ms, and one that slept 20 ms up to 57).
func TestExactCounts(t *testing.T) { testExactCounts(t, ReturnsInstructions) }

// testExactCounts is TestExactCounts with the returns seen as returns
// says.
func testExactCounts(t *testing.T, returns Returns) {
	bpftest.RequireRoot(t)
	prog := cProgram(t, "callprog")

	c, err := collector.New(context.Background(), collector.Config{Sources: collector.Sources{Marker: true}, ScanInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()

	// rec recurses depth deep, and deepDepth deep every deepEvery calls
	// (testdata/callprog.c): past a thread's table of open calls.
	const calls, threads, depth, deepDepth, deepEvery = 2000, 4, 5, 40, 10
	const wantRec = calls*threads/deepEvery*(deepDepth+1) + calls*threads*(deepEvery-1)/deepEvery*(depth+1)
	cmd := exec.Command(prog, strconv.Itoa(calls))
	stdin, _ := cmd.StdinPipe()
	stdout, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	out := bufio.NewScanner(stdout)
	if !out.Scan() || out.Text() != "ready" {
		t.Fatalf("program said %q, want ready", out.Text())
	}

	g, err := glob.Compile("multi_ret")
	if err != nil {
		t.Fatal(err)
	}
	r, err := glob.Compile("rec")
	if err != nil {
		t.Fatal(err)
	}
	sl, err := glob.Compile("slow")
	if err != nil {
		t.Fatal(err)
	}
	s, err := Attach(context.Background(), c.SourceCore(), []Target{
		{Binary: prog, Functions: g, Returns: returns},
		{Binary: prog, Functions: r, Span: "recursion", Returns: returns},
		{Binary: prog, Functions: sl, Returns: returns},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if tr := s.Traced(); len(tr) != 3 || len(tr[0].Func.Returns) != 5 || tr[1].Span != "recursion" || tr[2].Span != "slow" {
		t.Fatalf("traced %+v, want multi_ret with 5 return sites, rec as recursion, slow", tr)
	}
	if err := c.SetBudgets([]collector.BudgetRule{{Span: "slow", Budget: 100 * time.Millisecond}}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Snapshot(); err != nil { // a fresh window
		t.Fatal(err)
	}
	io.WriteString(stdin, "go\n")
	if !out.Scan() || out.Text() != "done" {
		t.Fatalf("program said %q, want done", out.Text())
	}
	if err := cmd.Wait(); err != nil {
		t.Fatal(err)
	}

	const slowCalls = 20
	got := map[string]snapshot.Series{}
	var overruns []snapshot.Overrun
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) && (got["multi_ret"].Count < calls*threads || got["recursion"].Count < wantRec || len(overruns) < slowCalls/2) {
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
		overruns = append(overruns, snap.Overruns...)
		time.Sleep(50 * time.Millisecond)
	}
	if n := got["multi_ret"].Count; n != calls*threads {
		t.Errorf("multi_ret: %d spans, want %d", n, calls*threads)
	}
	if n := got["recursion"].Count; n != wantRec {
		t.Errorf("rec: %d spans, want %d", n, wantRec)
	}
	if sr := got["slow"]; sr.Count != slowCalls || sr.OverBudget != slowCalls/2 {
		t.Errorf("slow: %d spans, %d over budget, want %d and %d", sr.Count, sr.OverBudget, slowCalls, slowCalls/2)
	}
	if len(overruns) != slowCalls/2 {
		t.Errorf("%d overrun records, want %d", len(overruns), slowCalls/2)
		for _, o := range overruns {
			t.Logf("overrun at %s: tid %d, %d ns, still running %v, stack error %q", o.Time.Format("15:04:05.000000"), o.TID, o.DurationNs, o.StillRunning, o.StackError)
		}
	}
	for _, o := range overruns {
		if o.Span != "slow" || o.Source != "functions" || o.DurationNs < 200_000_000 || o.PID != uint32(cmd.Process.Pid) {
			t.Errorf("overrun %+v, want slow from functions, at least 200ms, pid %d", o, cmd.Process.Pid)
		}
	}
	if len(overruns) > 0 {
		var frames []string
		for _, f := range overruns[0].UserStack {
			frames = append(frames, f.Function)
		}
		// Not checked here (TestArgsC checks the caller): gcc -O2
		// keeps no frame pointers, so the walk stops after the traced
		// function and the caller the return address at the stack's
		// top names.
		t.Logf("an overrun's user stack: %v", frames)
	}
	counts, err := s.Counts()
	if err != nil {
		t.Fatal(err)
	}
	if len(counts) != 0 {
		t.Errorf("counters %v, want none (no unpaired return, no replaced entry)", counts)
	}
	t.Logf("multi_ret %d spans, rec %d spans, slow %d spans (%d over budget, %d overrun records), counters %v",
		got["multi_ret"].Count, got["recursion"].Count, got["slow"].Count, got["slow"].OverBudget, len(overruns), counts)
}

// TestRefusals: a pattern that matches no traceable function, and a
// missing binary, are refused before anything is attached.
func TestRefusals(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root (CAP_BPF, CAP_PERFMON) to load BPF")
	}
	c, err := collector.New(context.Background(), collector.Config{Sources: collector.Sources{Marker: true}, ScanInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	all, _ := glob.Compile("*")
	none, _ := glob.Compile("no_such_function")
	for _, tc := range []struct {
		target Target
		want   string
	}{
		{Target{Binary: "/bin/true", Functions: none}, `no traceable function matches "no_such_function"`},
		{Target{Binary: exe + ".missing", Functions: all}, "no such file"},
	} {
		s, err := Attach(context.Background(), c.SourceCore(), []Target{tc.target})
		if err == nil {
			s.Close()
			t.Errorf("%s: attached, want an error with %q", tc.target.Binary, tc.want)
			continue
		}
		if !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want %q", tc.target.Binary, err, tc.want)
		}
	}
}
