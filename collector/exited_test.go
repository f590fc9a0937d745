//go:build linux

package collector

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	usdtsource "github.com/spanwatch/spanwatch/source/usdt"

	"github.com/spanwatch/spanwatch/internal/bpftest"
	"github.com/spanwatch/spanwatch/internal/symbolize"
	"github.com/spanwatch/spanwatch/internal/usdt"
)

// lateSymbolizer captures a process only once it has exited (a zombie or
// reaped): the collector then always meets the case of a short-lived
// process whose maps are gone before its record is read.
type lateSymbolizer struct {
	*symbolize.Symbolizer
}

func (l lateSymbolizer) Capture(pid uint32) error {
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			break // reaped
		}
		if i := strings.LastIndexByte(string(b), ')'); i > 0 && strings.HasPrefix(string(b[i:]), ") Z") {
			break // exited, not reaped
		}
	}
	return l.Symbolizer.Capture(pid)
}

// TestExitedChildFramesNamed runs a parent that forks children which run
// one USDT span each, over its budget, and exit at once: the overruns of
// the exited children still name their frames in the traced binary, from
// the probe site's address (issue 11, item 10).
func TestExitedChildFramesNamed(t *testing.T) {
	requireBPF(t)
	bin := bpftest.CProgram(t, "forker")
	sym := symbolize.New(symbolize.Config{})
	defer sym.Close()
	// Only the end stacks: in-span samples begin anywhere, not at a probe.
	c, err := New(context.Background(), Config{Sources: Sources{Marker: true}, ScanInterval: -1, Symbolizer: lateSymbolizer{sym}, Inflight: InflightConfig{Off: true}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	tr, err := usdtsource.Attach(context.Background(), c.SourceCore(), []usdt.SpanSource{{
		Binary: bin, Span: "forked", NameArg: -1, KeyArg: -1, StatusArg: -1, DurationArg: -1,
		Start: usdt.ProbeRef{Provider: "sw", Name: "f_start"}, End: usdt.ProbeRef{Provider: "sw", Name: "f_done"},
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	if err := c.SetBudgets([]BudgetRule{{Span: "forked", Budget: 5 * time.Millisecond}}); err != nil {
		t.Fatal(err)
	}
	const children = 3
	if out, err := exec.Command(bin, fmt.Sprint(children)).CombinedOutput(); err != nil {
		t.Fatalf("forker: %v\n%s", err, out)
	}
	var count uint64
	var n int
	for deadline := time.Now().Add(10 * time.Second); (n < children || count < children) && time.Now().Before(deadline); {
		time.Sleep(50 * time.Millisecond)
		s, err := c.Snapshot()
		if err != nil {
			t.Fatal(err)
		}
		count += seriesByName(s)["forked"].Count
		for _, ov := range s.Overruns {
			n++
			var funcs []string
			for _, f := range ov.UserStack {
				if f.Module == "forker" {
					funcs = append(funcs, f.Function)
				}
			}
			// On arm64 glibc's start-up code keeps frame records, so the
			// walk reaches forker's _start; on x86-64 it stops at main.
			if got := strings.TrimSuffix(strings.Join(funcs, ","), ",_start"); got != "slow,work,serve,main" {
				t.Errorf("overrun of exited pid %d: frames in forker %q, want slow,work,serve,main (stack %v)", ov.PID, got, ov.UserStack)
			}
			if !strings.Contains(ov.StackError, "exited before its maps were read") {
				t.Errorf("stack error %q, want it to say the process exited", ov.StackError)
			}
			if _, err := os.Stat(fmt.Sprintf("/proc/%d", ov.PID)); err == nil {
				t.Errorf("pid %d still exists: the test did not meet an exited process", ov.PID)
			}
		}
	}
	if n != children || count != children {
		t.Errorf("%d overruns and %d spans, want %d of each", n, count, children)
	}
}
