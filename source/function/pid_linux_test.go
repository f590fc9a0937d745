//go:build linux

package function

import (
	"context"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/spanwatch/spanwatch/collector"
	"github.com/spanwatch/spanwatch/internal/glob"
)

// TestPID: a pid: target traces one process. Two processes run the same
// callprog file (one inode: a uprobe on the file would fire in both);
// the target names the first's pid: its calls are counted exactly, the
// second's not at all, though it runs the very code the uprobes are on.
// The same with binary: naming the file in the first process's mount
// namespace. A pid no process has is an error naming it.
func TestPID(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root (CAP_BPF, CAP_PERFMON, CAP_SYS_ADMIN) to load BPF and attach uprobes")
	}
	prog := cProgram(t, "callprog")
	c, err := collector.New(context.Background(), collector.Config{Sources: collector.Sources{Marker: true}, ScanInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fn, _ := glob.Compile("multi_ret")
	const calls, threads = 300, 4
	n := strconv.Itoa(calls)
	for _, tc := range []struct {
		withBinary bool
		returns    Returns
	}{{false, ReturnsInstructions}, {true, ReturnsInstructions}, {false, ReturnsUretprobe}} {
		withBinary := tc.withBinary
		traced := startCall(t, prog, n)
		other := startCall(t, prog, n)
		// A uretprobe, like the entry uprobe, is attached for the pid
		// only: the other process's returns must not be seen either.
		target := Target{PID: traced.cmd.Process.Pid, Functions: fn, Returns: tc.returns}
		if withBinary {
			target.Binary = prog
		}
		s, err := Attach(context.Background(), c.SourceCore(), []Target{target})
		if err != nil {
			t.Fatal(err)
		}
		if tr := s.Traced(); len(tr) != 1 || tr[0].PID != target.PID || tr[0].Binary != prog || len(tr[0].Func.Returns) != 5 {
			t.Errorf("traced %+v, want multi_ret of %s in pid %d", tr, prog, target.PID)
		}
		if _, err := c.Snapshot(); err != nil { // a fresh window
			t.Fatal(err)
		}
		// The other process first: had its calls been counted, they
		// would be there by the time the pid's are.
		other.run(t)
		traced.run(t)
		got := spans(t, c, "multi_ret", calls*threads)
		time.Sleep(300 * time.Millisecond)
		got += spans(t, c, "multi_ret", 0)
		if got != calls*threads {
			t.Errorf("binary %v, returns %s: %d spans, want %d: the pid's calls only", withBinary, tc.returns, got, calls*threads)
		} else {
			t.Logf("binary %v, returns %s: %d spans, the pid's calls, none of the other process's %d", withBinary, tc.returns, got, calls*threads)
		}
		counts, err := s.Counts()
		if err != nil {
			t.Fatal(err)
		}
		if len(counts) != 0 {
			t.Errorf("counters %v, want none", counts)
		}
		s.Close()
	}

	// A pid no process has (pid_max is at most 1<<22).
	gone := Target{PID: 1<<22 + 1, Functions: fn}
	if s, err := Attach(context.Background(), c.SourceCore(), []Target{gone}); err == nil {
		s.Close()
		t.Errorf("attached to pid %d", gone.PID)
	} else if !strings.Contains(err.Error(), "no process 4194305 running an executable") {
		t.Errorf("got %v, want no process", err)
	}
}
