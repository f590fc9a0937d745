//go:build linux

// Package sdktest holds what the tests of the span SDKs for other
// languages (sdk/c, sdk/python, sdk/node, sdk/java) share: building
// libspanwatch with the project's own Makefile into a temporary directory,
// running a collector as the agent does (the marker source scanning /proc,
// user_events where the kernel has them), and gathering what one program
// sent: its series by span name and its overruns, with their stacks
// trimmed of the SDKs' own frames as reports show them.
//
// Other helpers' tests run on the same machines and emit spans too: every
// result here is filtered by the program's process id and span names.
package sdktest

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/spanwatch/spanwatch/collector"
	"github.com/spanwatch/spanwatch/internal/bpftest"
	"github.com/spanwatch/spanwatch/internal/profile"
	"github.com/spanwatch/spanwatch/snapshot"
)

// Root returns the module's root directory, found from the working
// directory (a package's directory while its tests run).
func Root(tb testing.TB) string {
	tb.Helper()
	dir, err := os.Getwd()
	if err != nil {
		tb.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			tb.Fatal("no go.mod above the working directory")
		}
		dir = parent
	}
}

// RequireTool skips the test when a program is missing, naming the Debian
// package (or npm package) that has it.
func RequireTool(tb testing.TB, name, pkg string) string {
	tb.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		tb.Skipf("%s not installed (%s)", name, pkg)
	}
	return p
}

var lib struct {
	once sync.Once
	dir  string
	err  error
}

// Mode checks the first line a test's program prints, the way its SDK
// chose to send spans: marker or userEvents. Either does on this host; in
// the VM (SPANWATCH_IN_VM=1) on a kernel with user_events, only userEvents
// does, unless the test's environment asks for the marker
// (SPANWATCH_EMIT=marker): there the SDK must have found user_events, and
// the spans the test counts came through them. It returns whether the
// program uses user_events.
func Mode(tb testing.TB, line, marker, userEvents string) bool {
	tb.Helper()
	line = strings.TrimSuffix(line, "\n")
	if line != marker && line != userEvents {
		tb.Fatalf("the program printed %q, want %q (marker) or %q (user_events)", line, marker, userEvents)
	}
	if bpftest.InVM() && os.Getenv("SPANWATCH_EMIT") != "marker" && line != userEvents {
		if _, err := os.Stat("/sys/kernel/tracing/user_events_data"); err == nil {
			tb.Fatalf("the program printed %q on a kernel with user_events: want %q", line, userEvents)
		}
	}
	return line == userEvents
}

// Lib builds libspanwatch (sdk/c/Makefile) once per test binary into a
// temporary directory of its own, and returns that directory:
// libspanwatch.so, libspanwatch.so.1, libspanwatch.a. Cleanup removes it.
func Lib(tb testing.TB) string {
	tb.Helper()
	RequireTool(tb, "make", "Debian package make")
	RequireTool(tb, "gcc", "Debian package build-essential")
	lib.once.Do(func() {
		dir, err := os.MkdirTemp("", "libspanwatch-")
		if err != nil {
			lib.err = err
			return
		}
		out, err := exec.Command("make", "-s", "-C", filepath.Join(Root(tb), "sdk", "c"), "O="+dir).CombinedOutput()
		if err != nil {
			lib.err = fmt.Errorf("make -C sdk/c O=%s: %v\n%s", dir, err, out)
			return
		}
		lib.dir = dir
	})
	if lib.err != nil {
		tb.Fatal(lib.err)
	}
	return lib.dir
}

// Cleanup removes what Lib built; call it from TestMain after the tests.
func Cleanup() {
	if lib.dir != "" {
		os.RemoveAll(lib.dir)
	}
}

// Watch is a collector as the agent runs it: the marker source scanning
// /proc, and user_events where the kernel has them.
type Watch struct {
	C *collector.Collector
	t testing.TB

	mu       sync.Mutex
	series   map[string]*snapshot.Series // summed over windows, by span name
	overruns []snapshot.Overrun
	stop     chan struct{}
	done     chan struct{}
}

// Start starts a collector with these budgets, scanning /proc every
// 200 ms. It skips the test where BPF cannot be loaded (not root).
func Start(tb testing.TB, budgets []collector.BudgetRule) *Watch {
	tb.Helper()
	if os.Geteuid() != 0 {
		tb.Skip("needs root (CAP_BPF, CAP_PERFMON, CAP_SYS_ADMIN) to load BPF and uprobe the marker")
	}
	cfg := collector.Config{
		Sources:      collector.Sources{Marker: true, UserEvents: true},
		ScanInterval: 200 * time.Millisecond,
	}
	if bpftest.InVM() {
		// Under qemu TCG (test/vm/run.sh -hostroot) a runtime's big
		// binary (Node.js: 99 MB, 185k symbols) takes longer to parse
		// than the agent waits on a real machine (10 s), and a JVM
		// keeps the emulated CPUs busy: the stacks' frames would stay
		// unnamed. Time there runs ten to twenty times slower.
		cfg.SymbolTimeout = 20 * time.Second
	}
	c, err := collector.New(context.Background(), cfg)
	if err != nil {
		tb.Fatalf("collector: %v", err)
	}
	if err := c.SetBudgets(budgets); err != nil {
		c.Close()
		tb.Fatal(err)
	}
	w := &Watch{C: c, t: tb, series: map[string]*snapshot.Series{}, stop: make(chan struct{}), done: make(chan struct{})}
	go w.loop()
	tb.Cleanup(w.Close)
	return w
}

func (w *Watch) loop() {
	defer close(w.done)
	t := time.NewTicker(100 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-w.stop:
			return
		case <-t.C:
		}
		s, err := w.C.Snapshot()
		if err != nil {
			continue
		}
		w.mu.Lock()
		for _, sr := range s.Series {
			x := w.series[sr.Span]
			if x == nil {
				x = &snapshot.Series{Span: sr.Span}
				w.series[sr.Span] = x
			}
			x.Count += sr.Count
			x.Errors += sr.Errors
			x.OverBudget += sr.OverBudget
			x.SumNs += sr.SumNs
			x.BudgetNs = sr.BudgetNs
		}
		w.overruns = append(w.overruns, s.Overruns...)
		w.mu.Unlock()
	}
}

// Close stops the collector; idempotent.
func (w *Watch) Close() {
	select {
	case <-w.stop:
		return
	default:
	}
	close(w.stop)
	<-w.done
	w.C.Close()
}

// Series returns the counts of a span name so far, summed over windows.
func (w *Watch) Series(name string) snapshot.Series {
	w.mu.Lock()
	defer w.mu.Unlock()
	if x := w.series[name]; x != nil {
		return *x
	}
	return snapshot.Series{Span: name}
}

// Overruns returns the overruns of process pid so far that ended (not
// the still-running reports), with span names starting with prefix.
func (w *Watch) Overruns(pid int, prefix string) []snapshot.Overrun {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []snapshot.Overrun
	for _, ov := range w.overruns {
		if int(ov.PID) == pid && strings.HasPrefix(ov.Span, prefix) && !ov.StillRunning {
			out = append(out, ov)
		}
	}
	return out
}

// Release tells the program pid, by a line on its standard input, to send
// the spans the test counts, once this Watch's collector has uprobed the
// marker the program calls: in its executable, or in a library it maps
// whose file name contains "spanwatch" (libspanwatch.so, an SDK's native
// part). The program's listening flag cannot say when: the marker's
// reference counter counts the uprobes of every agent on the host, and
// another one (another test's agent, scanning /proc every 2 s) may attach
// first; the spans sent before this collector attached reach that agent,
// not this one. It fails the test when the collector has not attached
// within timeout.
func (w *Watch) Release(tb testing.TB, pid int, stdin io.WriteCloser, timeout time.Duration) {
	tb.Helper()
	deadline := time.Now().Add(timeout)
	for {
		bins := markerFiles(pid)
		attached := w.C.MarkerBinaries()
		for _, a := range attached {
			if bins[a] {
				if _, err := io.WriteString(stdin, "go\n"); err != nil {
					tb.Fatalf("tell process %d to go: %v", pid, err)
				}
				stdin.Close()
				return
			}
		}
		if time.Now().After(deadline) {
			tb.Fatalf("the collector did not attach to process %d within %s: its files with the marker could be %v; attached: %v", pid, timeout, bins, attached)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// markerFiles returns the files of process pid that may hold the marker:
// its executable and the executable mappings of files whose name contains
// "spanwatch", by the paths the collector reports them under.
func markerFiles(pid int) map[string]bool {
	out := map[string]bool{}
	proc := fmt.Sprintf("/proc/%d", pid)
	if exe, err := os.Readlink(proc + "/exe"); err == nil {
		out[exe] = true
	}
	maps, err := os.ReadFile(proc + "/maps")
	if err != nil {
		return out
	}
	for _, line := range strings.Split(string(maps), "\n") {
		// START-END PERMS OFFSET DEV INODE PATH
		f := strings.Fields(line)
		if len(f) < 6 || len(f[1]) < 3 || f[1][2] != 'x' {
			continue
		}
		if path := strings.Join(f[5:], " "); strings.Contains(filepath.Base(path), "spanwatch") {
			out[path] = true
		}
	}
	return out
}

// Want is what one span name must have reached.
type Want struct {
	Count, Errors, OverBudget uint64
	// Slow is how many requests the program itself measured, around the
	// span, at the budget or more (Finish reads them): on a machine so
	// loaded that a request that does nothing waited that long for a CPU,
	// the agent rightly counts it over budget too. OverBudget is then at
	// least OverBudget and at most Slow.
	Slow uint64
}

// Wait waits up to timeout for each named series to reach its counts and
// for the overruns of pid to match the over-budget counts, then checks the
// figures exactly: more than wanted is a failure too.
func (w *Watch) Wait(tb testing.TB, pid int, timeout time.Duration, want map[string]Want) {
	tb.Helper()
	if bpftest.InVM() {
		// Under qemu TCG the agent waits up to ten times longer for a
		// runtime's symbols (Start's SymbolTimeout), and overruns come
		// only once their stacks are named.
		timeout *= 10
	}
	deadline := time.Now().Add(timeout)
	for {
		ok := true
		for name, x := range want {
			s := w.Series(name)
			if s.Count < x.Count || s.OverBudget < x.OverBudget || uint64(len(w.Overruns(pid, name))) < x.OverBudget {
				ok = false
			}
		}
		if ok || time.Now().After(deadline) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	// One more window, for anything past the wanted counts.
	time.Sleep(300 * time.Millisecond)
	for name, x := range want {
		s := w.Series(name)
		n := 0
		for _, ov := range w.Overruns(pid, name) {
			if ov.Span == name {
				n++
			}
		}
		most := max(x.OverBudget, x.Slow)
		if s.Count != x.Count || s.Errors != x.Errors || s.OverBudget < x.OverBudget || s.OverBudget > most || uint64(n) != s.OverBudget {
			tb.Errorf("%s: %d spans, %d errors, %d over budget, %d overruns; want %d, %d, %d (up to %d, as the program measured), as many overruns",
				name, s.Count, s.Errors, s.OverBudget, n, x.Count, x.Errors, x.OverBudget, most)
		}
	}
}

// Finish reads what a service test program prints after its first line,
// up to its end: "slow SERIES K" lines, then "done". It waits for the
// program and returns K by series.
func Finish(tb testing.TB, r *bufio.Reader, cmd *exec.Cmd) map[string]uint64 {
	tb.Helper()
	rest, _ := io.ReadAll(r)
	err := cmd.Wait()
	lines := strings.Split(strings.TrimSuffix(string(rest), "\n"), "\n")
	if err != nil || len(lines) == 0 || lines[len(lines)-1] != "done" {
		tb.Fatalf("%s: %v, printed %q", cmd, err, rest)
	}
	slow := map[string]uint64{}
	for _, l := range lines[:len(lines)-1] {
		var series string
		var k uint64
		if n, _ := fmt.Sscanf(l, "slow %s %d", &series, &k); n != 2 {
			tb.Fatalf("%s printed %q, want slow SERIES K", cmd, l)
		}
		slow[series] = k
	}
	return slow
}

// Top returns the function names of an overrun's user stack as reports
// show it: without the SDKs' own frames at the top (profile.TrimEnd), at
// most n.
func Top(ov snapshot.Overrun, n int) []string {
	frames, _ := profile.TrimEnd(ov.Source, ov.UserStack)
	var out []string
	for _, f := range frames {
		if len(out) == n {
			break
		}
		name := f.Function
		if name == "" {
			name = f.String()
		}
		out = append(out, name)
	}
	return out
}

// Stack renders a stack for a failure message, innermost first.
func Stack(frames []snapshot.Frame) string {
	var b strings.Builder
	for _, f := range frames {
		fmt.Fprintf(&b, "\n\t%s", f.String())
	}
	return b.String()
}

// Costs runs a language's benchmark program twice: with nobody listening
// (idle), and under a Watch (listening), and reports each figure it
// printed, in nanoseconds per iteration, as ns/NAME-idle and
// ns/NAME-listening, with the idle span's ratio to the empty call. cmd
// makes the program's command for n iterations. The program prints lines
// "NAME NS" — at least "empty" (an empty call in that language) and "span"
// — and "listening 0|1"; with SPANWATCH_BENCH_WAIT=1 in its environment it
// waits for a listener first.
func Costs(b *testing.B, cmd func(n int) *exec.Cmd, idleN, listenN int) {
	b.Helper()
	run := func(n int, wait bool) (figures map[string]float64, names []string, listening bool) {
		c := cmd(n)
		if wait {
			c.Env = append(c.Environ(), "SPANWATCH_BENCH_WAIT=1")
		}
		c.Stderr = os.Stderr
		out, err := c.Output()
		if err != nil {
			b.Fatalf("%s: %v\n%s", c, err, out)
		}
		figures = map[string]float64{}
		for _, line := range strings.Split(string(out), "\n") {
			f := strings.Fields(line)
			if len(f) != 2 {
				continue
			}
			if f[0] == "listening" {
				listening = f[1] == "1"
				continue
			}
			var v float64
			if _, err := fmt.Sscan(f[1], &v); err == nil {
				figures[f[0]] = v
				names = append(names, f[0])
			}
		}
		if figures["span"] == 0 || figures["empty"] == 0 {
			b.Fatalf("%s printed no span or empty cost:\n%s", c, out)
		}
		return figures, names, listening
	}
	b.ResetTimer()
	idle, names, listening := run(idleN, false)
	if listening {
		b.Skip("an agent of another test listened to the benchmark's program: the idle cost is not measured")
	}
	for _, n := range names {
		b.ReportMetric(idle[n], "ns/"+n+"-idle")
	}
	b.ReportMetric(idle["span"]/idle["empty"], "span/empty-idle")
	if listenN == 0 {
		return
	}
	b.StopTimer()
	w := Start(b, nil)
	defer w.Close()
	b.StartTimer()
	listen, names, listening := run(listenN, true)
	if !listening {
		b.Fatal("the program saw no listener")
	}
	for _, n := range names {
		if n != "empty" && n != "plain" {
			b.ReportMetric(listen[n], "ns/"+n+"-listening")
		}
	}
}

// Sandbox returns a temporary directory that Command mounts over /tmp for
// the program it runs, in a mount namespace of the program's own: JIT perf
// maps (/tmp/perf-PID.map, from Node.js, the JVM and the Python SDK) land
// there and go with the test, and the agent reads them as always, through
// /proc/PID/root. Files the program needs from the test's temporary
// directories go in the sandbox, where the program sees them under /tmp.
type Sandbox struct {
	Dir string // the directory, as the test sees it
}

// NewSandbox makes one; it needs root (mount) and util-linux's unshare.
func NewSandbox(tb testing.TB) *Sandbox {
	tb.Helper()
	RequireTool(tb, "unshare", "Debian package util-linux")
	if os.Geteuid() != 0 {
		tb.Skip("needs root to mount over /tmp in a mount namespace")
	}
	return &Sandbox{Dir: tb.TempDir()}
}

// Path is where the program sees a file of the sandbox.
func (s *Sandbox) Path(rel string) string { return filepath.Join("/tmp", rel) }

// Command runs name with args with the sandbox mounted over /tmp, in
// /tmp. Its process id is the program's (unshare and the shell exec it).
func (s *Sandbox) Command(name string, args ...string) *exec.Cmd {
	return exec.Command("unshare", append([]string{"--mount", "--propagation", "private", "--",
		"sh", "-c", `mount --bind "$0" /tmp && cd /tmp && exec "$@"`, s.Dir, name}, args...)...)
}

// CopyTree copies the files under the module root's dirs (relative paths)
// into dst, keeping their places, so that a build that writes beside its
// sources (pip, node-gyp) runs on a copy of the repository's layout.
func CopyTree(tb testing.TB, dst string, dirs ...string) {
	tb.Helper()
	root := Root(tb)
	for _, d := range dirs {
		err := filepath.WalkDir(filepath.Join(root, d), func(path string, e os.DirEntry, err error) error {
			if err != nil {
				return err
			}
			rel, err := filepath.Rel(root, path)
			if err != nil {
				return err
			}
			if e.IsDir() {
				return os.MkdirAll(filepath.Join(dst, rel), 0o755)
			}
			if !e.Type().IsRegular() {
				return nil
			}
			b, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			return os.WriteFile(filepath.Join(dst, rel), b, 0o644)
		})
		if err != nil {
			tb.Fatalf("copy %s: %v", d, err)
		}
	}
}
