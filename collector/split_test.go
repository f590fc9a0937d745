//go:build linux

package collector

import (
	"bufio"
	"context"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"

	usdtsource "github.com/spanwatch/spanwatch/source/usdt"

	"github.com/spanwatch/spanwatch/internal/bpftest"
	"github.com/spanwatch/spanwatch/internal/kernel"
	"github.com/spanwatch/spanwatch/internal/usdt"
)

// spanProc is a running cgmove-like program: it ends N spans per line
// "N" written to it.
type spanProc struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	out   *bufio.Scanner
}

func startSpanProc(t *testing.T, prog string) *spanProc {
	t.Helper()
	cmd := exec.Command(prog)
	stdin, _ := cmd.StdinPipe()
	stdout, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	p := &spanProc{cmd: cmd, stdin: stdin, out: bufio.NewScanner(stdout)}
	if !p.out.Scan() || p.out.Text() != "ready" {
		t.Fatalf("%s said %q, want ready", prog, p.out.Text())
	}
	return p
}

func (p *spanProc) moveTo(t *testing.T, cgroup string) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(cgroup, "cgroup.procs"), []byte(strconv.Itoa(p.cmd.Process.Pid)), 0o644); err != nil {
		t.Skipf("cannot move a process into %s: %v", cgroup, err)
	}
}

func (p *spanProc) spans(t *testing.T, n int) {
	t.Helper()
	io.WriteString(p.stdin, strconv.Itoa(n)+"\n")
	if !p.out.Scan() || p.out.Text() != "ok" {
		t.Fatalf("program said %q, want ok", p.out.Text())
	}
}

// TestSplitCgroupByProcess runs two executables (cgmove and a copy of it
// under another name) in one cgroup, each ending the same span: once the
// collector has seen the cgroup run both, its series are kept per process
// (the tgid in the kernel's key), each named after its executable, with
// exact counts; a third process of the first executable is merged into
// the first's series, and one of the second that exits before the
// collector reads its name (named by its comm) into the second's. A cgroup running one executable keeps tgid 0 in
// its keys and its cgroup-wide process name.
func TestSplitCgroupByProcess(t *testing.T) {
	progA := bpftest.CProgram(t, "cgmove")
	requireBPF(t)
	root := cgroup2Root(t)
	if root == "" {
		t.Skip("no cgroup v2 hierarchy mounted")
	}
	progB := filepath.Join(t.TempDir(), "cgmove2")
	b, err := os.ReadFile(progA)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(progB, b, 0o755); err != nil {
		t.Fatal(err)
	}
	shared, sharedID := newCgroup(t, root, "split")
	alone, aloneID := newCgroup(t, root, "alone")

	c, err := New(context.Background(), Config{Sources: Sources{Marker: true}, ScanInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if c.Kernel().Core == kernel.CoreCompat {
		t.Skip("the compat core (5.10 to 5.16) keeps no process in its series keys (bpf/aggregate.h split_process)")
	}
	a, bp, a2, solo := startSpanProc(t, progA), startSpanProc(t, progB), startSpanProc(t, progA), startSpanProc(t, progA)
	gone := startSpanProc(t, progB) // exits before the collector reads its name
	for _, p := range []*spanProc{a, bp, a2, gone} {
		p.moveTo(t, shared)
	}
	solo.moveTo(t, alone)
	var srcs []usdt.SpanSource
	for _, prog := range []string{progA, progB} {
		srcs = append(srcs, usdt.SpanSource{Binary: prog, Span: "cgmove", NameArg: -1, KeyArg: -1, StatusArg: -1, DurationArg: -1,
			Start: usdt.ProbeRef{Provider: "cg", Name: "start"}, End: usdt.ProbeRef{Provider: "cg", Name: "done"}})
	}
	tr, err := usdtsource.Attach(context.Background(), c.SourceCore(), srcs)
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()

	// The first spans of each cgroup land in its cgroup-wide series; the
	// snapshot that resolves the cgroups marks the shared one split.
	a.spans(t, 1)
	solo.spans(t, 2)
	s, err := c.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	isSplit := func(c *Collector, id uint64) bool { _, ok := c.splits.written[id]; return ok }
	if got := c.reader.core.SplitCgroups; int(got) != len(c.splits.written) || !isSplit(c, sharedID) || isSplit(c, aloneID) {
		t.Fatalf("split cgroups %d %v, want the shared cgroup %d and not %d", got, c.splits.written, sharedID, aloneID)
	}

	a.spans(t, 7)
	bp.spans(t, 11)
	a2.spans(t, 5)
	solo.spans(t, 3)
	gone.spans(t, 4)
	gone.stdin.Close()
	if err := gone.cmd.Wait(); err != nil {
		t.Fatal(err)
	}
	if s, err = c.Snapshot(); err != nil {
		t.Fatal(err)
	}
	type proc struct {
		cgroup  uint64
		process string
	}
	got := map[proc]uint64{}
	seen := map[proc]int{}
	for _, sr := range s.Series {
		if sr.Span != "cgmove" {
			continue
		}
		k := proc{sr.CgroupID, sr.Process}
		got[k] += sr.Count
		seen[k]++
	}
	nameA, nameB := filepath.Base(progA), filepath.Base(progB)
	want := map[proc]uint64{
		{sharedID, nameA}: 7 + 5,
		{sharedID, nameB}: 11 + 4, // the exited one named by the comm the kernel kept
		{sharedID, ""}:    0,      // the cgroup-wide series, idle since the split
		{aloneID, nameA}:  3,
	}
	if len(got) != len(want) {
		t.Errorf("series by (cgroup, process) = %v, want %v", got, want)
	}
	for k, n := range want {
		if got[k] != n || seen[k] != 1 {
			t.Errorf("cgroup %d process %q: %d spans in %d series, want %d in one", k.cgroup, k.process, got[k], seen[k], n)
		}
	}
	// The kernel's keys: one per process in the shared cgroup, tgid 0 in
	// the other.
	tgids := map[uint64]map[uint32]bool{}
	for key := range c.reader.byKey {
		if key.CgroupId == sharedID || key.CgroupId == aloneID {
			if tgids[key.CgroupId] == nil {
				tgids[key.CgroupId] = map[uint32]bool{}
			}
			tgids[key.CgroupId][key.Tgid] = true
		}
	}
	pid := func(p *spanProc) uint32 { return uint32(p.cmd.Process.Pid) }
	wantShared := map[uint32]bool{0: true, pid(a): true, pid(bp): true, pid(a2): true, pid(gone): true}
	if len(tgids[sharedID]) != len(wantShared) {
		t.Errorf("shared cgroup's keys have tgids %v, want %v", tgids[sharedID], wantShared)
	}
	for tg := range wantShared {
		if !tgids[sharedID][tg] {
			t.Errorf("shared cgroup's keys have tgids %v, want %v", tgids[sharedID], wantShared)
			break
		}
	}
	if len(tgids[aloneID]) != 1 || !tgids[aloneID][0] {
		t.Errorf("the one-executable cgroup's keys have tgids %v, want 0 only", tgids[aloneID])
	}

	// A collector started while the cgroup runs both (an agent's
	// restart) keeps its series per process from the first span: no
	// series without a process.
	tr.Close()
	c.Close()
	c, err = New(context.Background(), Config{Sources: Sources{Marker: true}, ScanInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if !isSplit(c, sharedID) || isSplit(c, aloneID) || int(c.reader.core.SplitCgroups) != len(c.splits.written) {
		t.Fatalf("at start split cgroups %d %v, want the shared cgroup %d and not %d", c.reader.core.SplitCgroups, c.splits.written, sharedID, aloneID)
	}
	if tr, err = usdtsource.Attach(context.Background(), c.SourceCore(), srcs); err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	a.spans(t, 2)
	bp.spans(t, 3)
	solo.spans(t, 4)
	if s, err = c.Snapshot(); err != nil {
		t.Fatal(err)
	}
	clear(got)
	clear(seen)
	for _, sr := range s.Series {
		if sr.Span == "cgmove" {
			got[proc{sr.CgroupID, sr.Process}] += sr.Count
			seen[proc{sr.CgroupID, sr.Process}]++
		}
	}
	want = map[proc]uint64{{sharedID, nameA}: 2, {sharedID, nameB}: 3, {aloneID, nameA}: 4}
	if len(got) != len(want) {
		t.Errorf("after a restart, series by (cgroup, process) = %v, want %v", got, want)
	}
	for k, n := range want {
		if got[k] != n || seen[k] != 1 {
			t.Errorf("after a restart, cgroup %d process %q: %d spans in %d series, want %d in one", k.cgroup, k.process, got[k], seen[k], n)
		}
	}
}

// BenchmarkSplitCost measures what keeping series per process costs the
// core per value (BenchmarkCoreValue's program and statistics), in one
// run, the cases alternating and each the best of 5 rounds: "none", no
// cgroup split (core_state.split_cgroups 0: no cg_split lookup), "other",
// some other cgroup split (the lookup, a miss), and "split", the value's
// cgroup split (the lookup, a hit, the tgid in the key); with and without
// the slot hint of the USDT fast path.
func BenchmarkSplitCost(b *testing.B) {
	ct := newCoreTest(b, Config{})
	stats, err := ebpf.EnableStats(uint32(unix.BPF_STATS_RUN_TIME))
	if err != nil {
		b.Fatalf("enable bpf stats: %v", err)
	}
	defer stats.Close()
	const cg, otherCg = 7, 8
	vals := make([]uint64, 1024)
	for i := range vals {
		vals[i] = 1e6 + uint64(i)*1999
	}
	n := max(b.N, 100000)
	core := ct.c.reader.core
	set := func(split uint64) {
		ct.c.objs.CgSplit.Delete(uint64(cg))
		ct.c.objs.CgSplit.Delete(uint64(otherCg))
		if split == 0 {
			atomic.StoreUint32(&core.SplitCgroups, 0)
			return
		}
		if err := ct.c.objs.CgSplit.Put(split, uint8(1)); err != nil {
			b.Fatal(err)
		}
		atomic.StoreUint32(&core.SplitCgroups, 1)
	}
	cases := []struct {
		name  string
		split uint64
	}{{"none", 0}, {"other", otherCg}, {"split", cg}}
	for _, hint := range []bool{false, true} {
		best := make([]time.Duration, len(cases))
		for round := 0; round < 5; round++ {
			for i, tc := range cases {
				set(tc.split)
				d, err := ct.core.Hot("bench.split", cg, vals, n, hint)
				if err != nil {
					b.Fatal(err)
				}
				if round == 0 || d < best[i] {
					best[i] = d
				}
			}
		}
		set(0)
		for i, tc := range cases {
			unit := "ns/value-" + tc.name
			if hint {
				unit += "-hint"
			}
			b.ReportMetric(float64(best[i].Nanoseconds()), unit)
		}
		b.Logf("hint %v: none %v, other cgroup split %v, this cgroup split %v a value", hint, best[0], best[1], best[2])
	}
}
