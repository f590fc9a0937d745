//go:build linux

package e2e

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"

	"github.com/spanwatch/spanwatch/collector"
	"github.com/spanwatch/spanwatch/emit"
	"github.com/spanwatch/spanwatch/snapshot"
	"github.com/spanwatch/spanwatch/userevents"
)

// The test binary doubles as the application process the multi-process
// tests start: with childEnv set, TestMain runs runChild instead of tests.
const (
	childEnv  = "SPANWATCH_E2E_CHILD" // span name to emit
	countEnv  = "SPANWATCH_E2E_COUNT" // how many spans
	waitEnv   = "SPANWATCH_E2E_WAIT"  // "1": wait for a line on stdin first
	inVM      = "SPANWATCH_IN_VM"
	spanEvent = "spanwatch_span"
)

func TestMain(m *testing.M) {
	if name := os.Getenv(childEnv); name != "" {
		os.Exit(runChild(name))
	}
	os.Exit(m.Run())
}

// runChild is an application: it reports how the span SDK started, waits
// for the go-ahead if asked, waits for a collector to listen, records its
// spans (durations 1..n µs, every 10th an error) and reports again.
func runChild(name string) int {
	n, err := strconv.Atoi(os.Getenv(countEnv))
	if err != nil {
		fmt.Fprintln(os.Stderr, "child: bad count:", err)
		return 2
	}
	fmt.Printf("ready mode=%s enabled=%t\n", emit.Mode(), emit.Enabled())
	if os.Getenv(waitEnv) == "1" {
		if _, err := bufio.NewReader(os.Stdin).ReadString('\n'); err != nil {
			fmt.Fprintln(os.Stderr, "child: read go-ahead:", err)
			return 2
		}
	}
	for deadline := time.Now().Add(5 * time.Second); !emit.Enabled(); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			fmt.Println("done enabled=false")
			return 3
		}
	}
	recordSpans(name, n)
	fmt.Printf("done enabled=%t write_errors=%d\n", emit.Enabled(), emit.WriteErrors())
	return 0
}

// recordSpans records n spans named name with durations 1..n µs, every
// 10th an error. want gives what a collector must count for them.
func recordSpans(name string, n int) {
	for i := 1; i <= n; i++ {
		emit.Record(&emit.Finished{Name: name, Duration: time.Duration(i) * time.Microsecond, Error: i%10 == 0})
	}
}

// want is what a collector must have aggregated for recordSpans(name, n).
type want struct {
	count, errors, sumNs uint64
}

func wantFor(n int) want {
	return want{count: uint64(n), errors: uint64(n / 10), sumNs: uint64(n*(n+1)/2) * 1000}
}

// require skips the test where the kernel cannot run it (no root, no
// user_events) and fails it instead inside the test VM, whose kernel must
// have everything.
func require(t *testing.T) {
	t.Helper()
	var reason string
	switch {
	case os.Geteuid() != 0:
		reason = "needs root to load BPF and open perf events"
	case emit.Mode() != "user_events":
		why := "SPANWATCH_EMIT=" + os.Getenv("SPANWATCH_EMIT")
		if ev, err := userevents.Register("spanwatch_e2e_probe u32 x"); err != nil {
			why = err.Error()
		} else {
			ev.Close()
		}
		reason = fmt.Sprintf("the span SDK uses %s, not user_events: %s", emit.Mode(), why)
	}
	if reason == "" {
		return
	}
	if os.Getenv(inVM) == "1" {
		t.Fatalf("%s=1 but: %s", inVM, reason)
	}
	t.Skip(reason)
}

// newCollector starts a collector with only the user_events source.
func newCollector(t *testing.T, cfg collector.Config) *collector.Collector {
	t.Helper()
	cfg.Sources = collector.Sources{UserEvents: true}
	cfg.ScanInterval = -1
	c, err := collector.New(context.Background(), cfg)
	if err != nil {
		t.Fatalf("start collector: %v", err)
	}
	t.Cleanup(func() { c.Close() })
	ok, method := c.UserEventsAttached()
	wantMethod := "fentry"
	if cfg.ForceKprobe {
		wantMethod = "kprobe"
	}
	if !ok || method != wantMethod {
		t.Fatalf("user_events source attached=%t method=%q, want %s", ok, method, wantMethod)
	}
	return c
}

// snapshotSeries takes a snapshot and sums its series by span name over
// cgroups.
func snapshotSeries(t *testing.T, c *collector.Collector) (map[string]want, *snapshot.Snapshot) {
	t.Helper()
	s, err := c.Snapshot()
	if err != nil {
		t.Fatalf("snapshot: %v", err)
	}
	got := map[string]want{}
	for _, sr := range s.Series {
		w := got[sr.Span]
		w.count += sr.Count
		w.errors += sr.Errors
		w.sumNs += sr.SumNs
		got[sr.Span] = w
	}
	return got, s
}

func checkSeries(t *testing.T, got map[string]want, name string, w want) {
	t.Helper()
	if got[name] != w {
		t.Errorf("series %s: count %d errors %d sum %dns; want count %d errors %d sum %dns",
			name, got[name].count, got[name].errors, got[name].sumNs, w.count, w.errors, w.sumNs)
	}
}

func waitEnabled(t *testing.T, want bool) {
	t.Helper()
	for deadline := time.Now().Add(2 * time.Second); emit.Enabled() != want; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("emit.Enabled() stayed %t for 2s, want %t", !want, want)
		}
	}
}

// onCPU runs fn on a thread pinned to cpu. The thread is never unpinned: it
// exits with the goroutine.
func onCPU(t *testing.T, cpu int, fn func()) {
	t.Helper()
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // not unlocked: the runtime ends the thread
		var set unix.CPUSet
		set.Set(cpu)
		if err := unix.SchedSetaffinity(0, &set); err != nil {
			errc <- fmt.Errorf("pin to cpu %d: %w", cpu, err)
			return
		}
		var got unix.CPUSet
		if err := unix.SchedGetaffinity(0, &got); err != nil || got.Count() != 1 || !got.IsSet(cpu) {
			errc <- fmt.Errorf("pinned to cpu %d but affinity is %v (%v)", cpu, got, err)
			return
		}
		fn()
		errc <- nil
	}()
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
}

func onlineCPUs(t *testing.T) []int {
	t.Helper()
	var set unix.CPUSet
	if err := unix.SchedGetaffinity(0, &set); err != nil {
		t.Fatal(err)
	}
	var cpus []int
	for c := 0; c < len(set)*64; c++ {
		if set.IsSet(c) {
			cpus = append(cpus, c)
		}
	}
	if len(cpus) < 2 {
		if os.Getenv(inVM) == "1" {
			t.Fatalf("the VM has %d CPUs, the per-CPU tests need 2 (is CONFIG_ACPI=y?)", len(cpus))
		}
		t.Skipf("needs 2 CPUs, have %d", len(cpus))
	}
	return cpus
}

// TestEnableBitFollowsCollector: the SDK's enable bit is off while no
// collector listens, on while one is attached, off again after it closes.
func TestEnableBitFollowsCollector(t *testing.T) {
	require(t)
	if emit.Enabled() {
		t.Fatal("emit.Enabled() before any collector started")
	}
	c := newCollector(t, collector.Config{})
	waitEnabled(t, true)
	id, err := userevents.EventID(spanEvent)
	if err != nil {
		t.Fatal(err)
	}
	c.Close()
	waitEnabled(t, false)
	// This process still has the event registered, so it keeps its id.
	if id2, err := userevents.EventID(spanEvent); err != nil || id2 != id {
		t.Fatalf("event id %d after the collector closed (%v), was %d", id2, err, id)
	}
	// Spans recorded while nobody listens cost a load and go nowhere; a new
	// collector starts from zero.
	recordSpans("e2e.unheard", 100)
	c2 := newCollector(t, collector.Config{})
	waitEnabled(t, true)
	got, _ := snapshotSeries(t, c2)
	checkSeries(t, got, "e2e.unheard", want{})
}

// TestSpansOnEachCPU writes spans from a thread pinned to each CPU in turn.
// The collector must see every one: perf_tp_event runs only on CPUs with a
// perf event open on the tracepoint, so a collector that opened it on CPU 0
// alone would lose all of CPU 1's spans silently.
func TestSpansOnEachCPU(t *testing.T) {
	require(t)
	cpus := onlineCPUs(t)
	c := newCollector(t, collector.Config{})
	for _, cpu := range cpus {
		onCPU(t, cpu, func() { recordSpans(fmt.Sprintf("e2e.cpu%d", cpu), 1000) })
	}
	got, s := snapshotSeries(t, c)
	for _, cpu := range cpus {
		checkSeries(t, got, fmt.Sprintf("e2e.cpu%d", cpu), wantFor(1000))
	}
	if s.Stats.ShortEvents != 0 || s.Stats.ReadErrors != 0 || s.Stats.StatsFull != 0 {
		t.Errorf("collector drop counters: %+v", s.Stats)
	}
}

// child is an application process: this test binary in child mode.
type child struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	lines *bufio.Scanner
}

func startChild(t *testing.T, name string, n int, wait bool) *child {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(exe)
	cmd.Env = append(os.Environ(), childEnv+"="+name, countEnv+"="+strconv.Itoa(n))
	if wait {
		cmd.Env = append(cmd.Env, waitEnv+"=1")
	}
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	return &child{cmd: cmd, stdin: stdin, lines: bufio.NewScanner(stdout)}
}

// expect reads the child's next line and checks it.
func (ch *child) expect(t *testing.T, want string) {
	t.Helper()
	if !ch.lines.Scan() {
		t.Fatalf("child %d: no line, want %q (%v)", ch.cmd.Process.Pid, want, ch.lines.Err())
	}
	if got := ch.lines.Text(); !strings.HasPrefix(got, want) {
		t.Fatalf("child %d said %q, want %q", ch.cmd.Process.Pid, got, want)
	}
}

func (ch *child) wait(t *testing.T) {
	t.Helper()
	ch.expect(t, "done enabled=true write_errors=0")
	if err := ch.cmd.Wait(); err != nil {
		t.Fatalf("child %d: %v", ch.cmd.Process.Pid, err)
	}
}

// TestCollectorBeforeApp: the application starts while the collector
// listens; it registers the event and finds it enabled at once.
func TestCollectorBeforeApp(t *testing.T) {
	require(t)
	c := newCollector(t, collector.Config{})
	ch := startChild(t, "e2e.before", 700, false)
	ch.expect(t, "ready mode=user_events enabled=true")
	ch.wait(t)
	got, _ := snapshotSeries(t, c)
	checkSeries(t, got, "e2e.before", wantFor(700))
}

// TestCollectorAfterApp: the application runs first, with nobody
// listening; the collector attaches to the event it registered and the
// kernel flips the enable bit in the running process.
func TestCollectorAfterApp(t *testing.T) {
	require(t)
	ch := startChild(t, "e2e.after", 600, true)
	ch.expect(t, "ready mode=user_events enabled=false")
	c := newCollector(t, collector.Config{})
	if _, err := io.WriteString(ch.stdin, "go\n"); err != nil {
		t.Fatal(err)
	}
	ch.wait(t)
	got, _ := snapshotSeries(t, c)
	checkSeries(t, got, "e2e.after", wantFor(600))
}

// TestTwoAppsSameEvent: two processes write the same user_event at once.
func TestTwoAppsSameEvent(t *testing.T) {
	require(t)
	c := newCollector(t, collector.Config{})
	a := startChild(t, "e2e.app_a", 800, true)
	b := startChild(t, "e2e.app_b", 900, true)
	a.expect(t, "ready mode=user_events enabled=true")
	b.expect(t, "ready mode=user_events enabled=true")
	io.WriteString(a.stdin, "go\n")
	io.WriteString(b.stdin, "go\n")
	a.wait(t)
	b.wait(t)
	got, _ := snapshotSeries(t, c)
	checkSeries(t, got, "e2e.app_a", wantFor(800))
	checkSeries(t, got, "e2e.app_b", wantFor(900))
}

// TestAppExitsAnotherStarts: an application exits and another starts; the
// event keeps its id (the collector holds it) and both are counted.
func TestAppExitsAnotherStarts(t *testing.T) {
	require(t)
	c := newCollector(t, collector.Config{})
	id, err := userevents.EventID(spanEvent)
	if err != nil {
		t.Fatal(err)
	}
	first := startChild(t, "e2e.first", 300, false)
	first.expect(t, "ready mode=user_events enabled=true")
	first.wait(t)
	second := startChild(t, "e2e.second", 400, false)
	second.expect(t, "ready mode=user_events enabled=true")
	second.wait(t)
	if id2, err := userevents.EventID(spanEvent); err != nil || id2 != id {
		t.Fatalf("event id %d after the first app exited (%v), was %d", id2, err, id)
	}
	got, _ := snapshotSeries(t, c)
	checkSeries(t, got, "e2e.first", wantFor(300))
	checkSeries(t, got, "e2e.second", wantFor(400))
}

// countingProgram returns a program of type typ that adds one to slot 0 of
// the returned array map each time it runs.
func countingProgram(t *testing.T, typ ebpf.ProgramType) (*ebpf.Program, *ebpf.Map) {
	t.Helper()
	m, err := ebpf.NewMap(&ebpf.MapSpec{Type: ebpf.Array, KeySize: 4, ValueSize: 8, MaxEntries: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	prog, err := ebpf.NewProgram(&ebpf.ProgramSpec{
		Type:    typ,
		License: "GPL",
		Instructions: asm.Instructions{
			asm.StoreImm(asm.RFP, -4, 0, asm.Word), // key 0
			asm.LoadMapPtr(asm.R1, m.FD()),
			asm.Mov.Reg(asm.R2, asm.RFP),
			asm.Add.Imm(asm.R2, -4),
			asm.FnMapLookupElem.Call(),
			asm.JEq.Imm(asm.R0, 0, "out"),
			asm.Mov.Imm(asm.R1, 1),
			asm.StoreXAdd(asm.R0, asm.R1, asm.DWord),
			asm.Mov.Imm(asm.R0, 0).WithSymbol("out"),
			asm.Return(),
		},
	})
	if err != nil {
		t.Fatalf("load counting program: %v", err)
	}
	t.Cleanup(func() { prog.Close() })
	return prog, m
}

func hits(t *testing.T, m *ebpf.Map) uint64 {
	t.Helper()
	var n uint64
	if err := m.Lookup(uint32(0), &n); err != nil {
		t.Fatal(err)
	}
	return n
}

// TestKernelFact_TracepointBPFNeverRunsOnUserEvents documents why spanwatch
// hooks perf_tp_event instead of the user_event's tracepoint: a BPF program
// attached with link.Tracepoint("user_events", name) attaches fine, enables
// the event, and never runs (the kernel's user_events perf path does not
// call trace_call_bpf). If this test fails because the program ran, the
// kernel changed: the plain tracepoint may now be a simpler attach point.
func TestKernelFact_TracepointBPFNeverRunsOnUserEvents(t *testing.T) {
	require(t)
	// Control: the same counting program does run on an ordinary
	// tracepoint, so a 0 below means the program was not called.
	ctl, ctlHits := countingProgram(t, ebpf.TracePoint)
	ctlLink, err := link.Tracepoint("sched", "sched_process_fork", ctl, nil)
	if err != nil {
		t.Fatalf("attach control program to sched:sched_process_fork: %v", err)
	}
	defer ctlLink.Close()
	if err := exec.Command("/bin/true").Run(); err != nil {
		t.Fatal(err)
	}
	if n := hits(t, ctlHits); n == 0 {
		t.Fatal("the control program did not run on sched:sched_process_fork: the counting program is broken")
	}

	prog, tpHits := countingProgram(t, ebpf.TracePoint)
	tp, err := link.Tracepoint("user_events", spanEvent, prog, nil)
	if err != nil {
		t.Fatalf("attach to tracepoint user_events:%s: %v", spanEvent, err)
	}
	defer tp.Close()
	waitEnabled(t, true) // the attach enables the event
	c := newCollector(t, collector.Config{})
	// Pinned to CPU 0, where link.Tracepoint opened its perf event, so the
	// per-CPU perf event question does not enter into it.
	onCPU(t, 0, func() { recordSpans("e2e.tracepoint", 1000) })
	got, _ := snapshotSeries(t, c)
	checkSeries(t, got, "e2e.tracepoint", wantFor(1000))
	if n := hits(t, tpHits); n != 0 {
		t.Errorf("a BPF program on tracepoint user_events:%s ran %d times for 1000 writes; kernel %s changed: the tracepoint may now work as an attach point", spanEvent, n, uname())
	}
}

func uname() string {
	var u unix.Utsname
	if err := unix.Uname(&u); err != nil {
		return "?"
	}
	return unix.ByteSliceToString(u.Release[:])
}

//go:noinline
func recordSlowSpan(traceID [16]byte) {
	emit.Record(&emit.Finished{Name: "e2e.slow", Duration: 20 * time.Millisecond, TraceID: traceID, SpanID: [8]byte{7: 9}})
}

// TestOverrunUserStack: spans over their budget send ring buffer records
// with the writer's user stack, symbolized.
func TestOverrunUserStack(t *testing.T) {
	require(t)
	c := newCollector(t, collector.Config{})
	if err := c.SetBudgets([]collector.BudgetRule{{Span: "e2e.slow", Budget: 5 * time.Millisecond}}); err != nil {
		t.Fatal(err)
	}
	traceID := [16]byte{0xca, 0xfe, 15: 3}
	for range 10 {
		recordSlowSpan(traceID)
		emit.Record(&emit.Finished{Name: "e2e.slow", Duration: time.Millisecond}) // within budget
	}
	var ovs []snapshot.Overrun
	var over uint64
	for deadline := time.Now().Add(15 * time.Second); len(ovs) < 10 && time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		s, err := c.Snapshot()
		if err != nil {
			t.Fatal(err)
		}
		ovs = append(ovs, s.Overruns...)
		for _, sr := range s.Series {
			if sr.Span == "e2e.slow" {
				over += sr.OverBudget
			}
		}
	}
	if len(ovs) != 10 || over != 10 {
		t.Fatalf("%d overrun records and %d over budget, want 10 and 10", len(ovs), over)
	}
	for _, ov := range ovs {
		if ov.Span != "e2e.slow" || ov.DurationNs != uint64(20*time.Millisecond) || ov.BudgetNs != uint64(5*time.Millisecond) ||
			ov.PID != uint32(os.Getpid()) || ov.TraceID != "cafe0000000000000000000000000003" || ov.SpanID != "0000000000000009" ||
			ov.Source != "user_events" {
			t.Fatalf("overrun %+v", ov)
		}
		if len(ov.UserStack) == 0 {
			t.Fatalf("overrun without a user stack (%s)", ov.StackError)
		}
		var funcs []string
		for _, f := range ov.UserStack {
			funcs = append(funcs, f.Function)
		}
		if !slices.Contains(funcs, "github.com/spanwatch/spanwatch/test/vm/e2e.recordSlowSpan") {
			t.Fatalf("user stack lacks the function that recorded the span: %v", funcs)
		}
	}
}

// TestKprobeFallback: with fentry unavailable (forced by the flag), the
// kprobe on perf_tp_event sees every write, from every CPU and process.
func TestKprobeFallback(t *testing.T) {
	require(t)
	cpus := onlineCPUs(t)
	c := newCollector(t, collector.Config{ForceKprobe: true})
	for _, cpu := range cpus {
		onCPU(t, cpu, func() { recordSpans(fmt.Sprintf("e2e.kprobe%d", cpu), 500) })
	}
	ch := startChild(t, "e2e.kprobe_child", 250, false)
	ch.expect(t, "ready mode=user_events enabled=true")
	ch.wait(t)
	got, _ := snapshotSeries(t, c)
	for _, cpu := range cpus {
		checkSeries(t, got, fmt.Sprintf("e2e.kprobe%d", cpu), wantFor(500))
	}
	checkSeries(t, got, "e2e.kprobe_child", wantFor(250))
}

// BenchmarkRecord measures emit.Record of one span over user_events: with no
// collector (one load, nothing written), and with a collector attached by
// fentry and by kprobe (writev, perf_tp_event, the BPF program). Under the
// VM's TCG emulation absolute times are slow; compare the ratios.
func BenchmarkRecord(b *testing.B) {
	if os.Geteuid() != 0 || emit.Mode() != "user_events" {
		if os.Getenv(inVM) == "1" {
			b.Fatalf("%s=1 but the span SDK uses %s", inVM, emit.Mode())
		}
		b.Skip("needs root and user_events")
	}
	f := &emit.Finished{Name: "e2e.bench", Duration: time.Millisecond}
	b.Run("no_collector", func(b *testing.B) {
		if emit.Enabled() {
			b.Fatal("a collector is attached")
		}
		for b.Loop() {
			emit.Record(f)
		}
	})
	for _, kprobe := range []bool{false, true} {
		name := "fentry"
		if kprobe {
			name = "kprobe"
		}
		b.Run(name, func(b *testing.B) {
			c, err := collector.New(context.Background(), collector.Config{
				Sources: collector.Sources{UserEvents: true}, ScanInterval: -1, ForceKprobe: kprobe,
			})
			if err != nil {
				b.Fatal(err)
			}
			defer c.Close()
			if _, err := c.Snapshot(); err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			n := 0
			for b.Loop() {
				emit.Record(f)
				n++
			}
			s, err := c.Snapshot()
			if err != nil {
				b.Fatal(err)
			}
			var got uint64
			for _, sr := range s.Series {
				if sr.Span == "e2e.bench" {
					got += sr.Count
				}
			}
			if got != uint64(n) {
				b.Fatalf("collector counted %d of %d spans", got, n)
			}
		})
	}
}
