//go:build linux

package collector

import (
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/spanwatch/spanwatch/emit"
	"github.com/spanwatch/spanwatch/snapshot"
)

// TestMain lets a test re-execute this binary as a short-lived span emitter.
func TestMain(m *testing.M) {
	switch os.Getenv("SPANWATCH_TEST_CHILD") {
	case "exit-after-overrun":
		childEmitAndExit()
		return
	case "quota-emit":
		childEmitNames()
		return
	}
	os.Exit(m.Run())
}

// childEmitAndExit emits 50 spans, one of them over budget, starts a span
// it never ends, and exits at once.
func childEmitAndExit() {
	deadline := time.Now().Add(5 * time.Second)
	for !emit.Enabled() && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	for i := 0; i < 49; i++ {
		emit.Record(&emit.Finished{Name: "child.span", Duration: time.Millisecond})
	}
	childSlowSpan()
	_ = emit.Start("child.never.ends")
	os.Exit(0)
}

// childEmitNames (SPANWATCH_TEST_CHILD=quota-emit) waits for the marker
// uprobe, then emits SPANWATCH_QUOTA_NAMES names "PREFIX.i", each
// SPANWATCH_QUOTA_REPS times, and exits; status 3 if no collector
// listened within 10 s.
func childEmitNames() {
	prefix := os.Getenv("SPANWATCH_QUOTA_PREFIX")
	n, _ := strconv.Atoi(os.Getenv("SPANWATCH_QUOTA_NAMES"))
	reps, _ := strconv.Atoi(os.Getenv("SPANWATCH_QUOTA_REPS"))
	deadline := time.Now().Add(10 * time.Second)
	for !emit.Enabled() && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	if !emit.Enabled() {
		os.Exit(3)
	}
	for r := 0; r < reps; r++ {
		for i := 0; i < n; i++ {
			emit.Record(&emit.Finished{Name: prefix + "." + strconv.Itoa(i), Duration: time.Microsecond})
		}
	}
	os.Exit(0)
}

//go:noinline
func childSlowSpan() {
	emit.Record(&emit.Finished{Name: "child.span", Duration: time.Second})
}

// TestProcessExitsRightAfterOverrun runs a child that emits spans and exits
// at once, in the middle of a span: the counts are exact, nothing else is
// disturbed, and the overrun still has its stack.
func TestProcessExitsRightAfterOverrun(t *testing.T) {
	c := newMarkerCollector(t, Config{})
	if err := c.SetBudgets([]BudgetRule{{Span: "child.span", Budget: 100 * time.Millisecond}}); err != nil {
		t.Fatal(err)
	}
	exe, _ := os.Executable()
	for i := 0; i < 3; i++ {
		cmd := exec.Command(exe)
		cmd.Env = append(os.Environ(), "SPANWATCH_TEST_CHILD=exit-after-overrun", "SPANWATCH_EMIT=marker")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("child: %v\n%s", err, out)
		}
	}
	var sr snapshot.Series
	var ovs []snapshot.Overrun
	deadline := time.Now().Add(5 * time.Second)
	for len(ovs) < 3 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
		s, err := c.Snapshot()
		if err != nil {
			t.Fatal(err)
		}
		for _, x := range s.Series {
			if x.Span == "child.span" {
				sr.Count += x.Count
				sr.OverBudget += x.OverBudget
			}
			if x.Span == "child.never.ends" && x.Count > 0 {
				t.Errorf("a span that never ended was counted")
			}
		}
		ovs = append(ovs, s.Overruns...)
	}
	if sr.Count != 150 || sr.OverBudget != 3 {
		t.Errorf("child.span count %d over budget %d, want 150 and 3", sr.Count, sr.OverBudget)
	}
	if len(ovs) != 3 {
		t.Fatalf("%d overruns, want 3", len(ovs))
	}
	for _, ov := range ovs {
		var funcs []string
		for _, f := range ov.UserStack {
			funcs = append(funcs, f.Function)
		}
		if !contains(funcs, "github.com/spanwatch/spanwatch/collector.childSlowSpan") {
			t.Errorf("overrun of exited pid %d: stack %v lacks childSlowSpan (stack_error %q)", ov.PID, strings.Join(funcs, " <- "), ov.StackError)
		}
	}
}
