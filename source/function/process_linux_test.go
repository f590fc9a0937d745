//go:build linux

package function

import (
	"bufio"
	"context"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/spanwatch/spanwatch/collector"
	"github.com/spanwatch/spanwatch/internal/glob"
)

// A callProc is a running copy of testdata/callprog.c, waiting for "go".
type callProc struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	out   *bufio.Scanner
}

// startCall starts argv (a copy of callprog, perhaps through unshare)
// and waits for it to say ready.
func startCall(t *testing.T, argv ...string) *callProc {
	t.Helper()
	cmd := exec.Command(argv[0], argv[1:]...)
	stdin, _ := cmd.StdinPipe()
	stdout, _ := cmd.StdoutPipe()
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	p := &callProc{cmd: cmd, stdin: stdin, out: bufio.NewScanner(stdout)}
	if !p.out.Scan() || p.out.Text() != "ready" {
		t.Fatalf("%v said %q, want ready", argv, p.out.Text())
	}
	return p
}

// run has the program make its calls and waits for it to exit.
func (p *callProc) run(t *testing.T) {
	t.Helper()
	io.WriteString(p.stdin, "go\n")
	if !p.out.Scan() || p.out.Text() != "done" {
		t.Fatalf("program said %q, want done", p.out.Text())
	}
	if err := p.cmd.Wait(); err != nil {
		t.Fatal(err)
	}
}

// spans returns the spans named span counted since the last snapshot,
// waiting (up to a minute, for a loaded machine) for at least want.
func spans(t *testing.T, c *collector.Collector, span string, want uint64) uint64 {
	t.Helper()
	var n uint64
	for deadline := time.Now().Add(time.Minute); ; {
		snap, err := c.Snapshot()
		if err != nil {
			t.Fatal(err)
		}
		for _, sr := range snap.Series {
			if sr.Span == span {
				n += sr.Count
			}
		}
		if n >= want || time.Now().After(deadline) {
			return n
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestProcessGlob: a process: glob traces every process whose executable
// is named so, wherever its file is: two copies of callprog in two
// directories, one run through a mount namespace of its own where its
// directory is bind-mounted elsewhere (the path its /proc/PID/exe names
// does not hold it on the host), are attached once each, and a third
// copy named otherprog is not. Each copy's calls are counted exactly, one
// copy at a time. A copy started after the attach is picked up by the
// next scan, and a file no process runs any more is let go after
// source.ReleaseScans scans.
func TestProcessGlob(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root (CAP_BPF, CAP_PERFMON, CAP_SYS_ADMIN) to load BPF, attach uprobes and mount in a namespace of its own")
	}
	if runtime.GOARCH != "amd64" {
		t.Skip("the pairing is tested on x86-64 so far")
	}
	cc, err := exec.LookPath("cc")
	if err != nil {
		t.Skip("no C compiler (cc) on PATH: install build-essential")
	}
	unshare, err := exec.LookPath("unshare")
	if err != nil {
		t.Skip("no unshare on PATH: install util-linux")
	}
	dir := t.TempDir()
	for _, d := range []string{"a", "b", "b-seen", "c", "d"} {
		if err := os.Mkdir(filepath.Join(dir, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	progA := filepath.Join(dir, "a", "callprog")
	if out, err := exec.Command(cc, "-O2", "-pthread", "-o", progA, "testdata/callprog.c").CombinedOutput(); err != nil {
		t.Fatalf("cc: %v: %s", err, out)
	}
	// Copies: files of their own (inodes), the same code.
	progB := filepath.Join(dir, "b", "callprog")
	progC := filepath.Join(dir, "c", "otherprog")
	progD := filepath.Join(dir, "d", "callprog2")
	for _, p := range []string{progB, progC, progD} {
		if out, err := exec.Command("cp", progA, p).CombinedOutput(); err != nil {
			t.Fatalf("cp: %v: %s", err, out)
		}
	}

	c, err := collector.New(context.Background(), collector.Config{Sources: collector.Sources{Marker: true}, ScanInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()

	const calls, threads = 300, 4
	n := strconv.Itoa(calls)
	a := startCall(t, progA, n)
	// b's directory is mounted at b-seen in a mount namespace of its
	// own: the process runs b-seen/callprog, which on the host is an
	// empty directory's entry.
	bSeen := filepath.Join(dir, "b-seen")
	b := startCall(t, unshare, "-m", "--propagation", "private", "sh", "-c",
		`mount --bind "$1" "$2" && exec "$2/callprog" "$3"`, "sh", filepath.Dir(progB), bSeen, n)
	if exe, _ := os.Readlink("/proc/" + strconv.Itoa(b.cmd.Process.Pid) + "/exe"); exe != filepath.Join(bSeen, "callprog") {
		t.Fatalf("b runs %q, want %s", exe, filepath.Join(bSeen, "callprog"))
	}
	other := startCall(t, progC, n)

	procs, _ := glob.Compile("callprog*")
	fn, _ := glob.Compile("multi_ret")
	s, err := Attach(context.Background(), c.SourceCore(), []Target{{Process: procs, Functions: fn}})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	binaries := func() []string {
		var out []string
		for _, tr := range s.Traced() {
			if tr.Func.Name != "multi_ret" || len(tr.Func.Returns) != 5 {
				t.Errorf("traced %+v, want multi_ret with 5 return sites", tr)
			}
			out = append(out, tr.Binary)
		}
		return out
	}
	if got, want := binaries(), []string{progA, filepath.Join(bSeen, "callprog")}; !slices.Equal(got, want) {
		t.Fatalf("traced in %v, want %v", got, want)
	}
	if _, err := c.Snapshot(); err != nil { // a fresh window
		t.Fatal(err)
	}
	for _, p := range []struct {
		name string
		proc *callProc
		want uint64
	}{
		{"callprog", a, calls * threads},
		{"callprog in its own mount namespace", b, calls * threads},
		{"otherprog", other, 0},
	} {
		p.proc.run(t)
		if got := spans(t, c, "multi_ret", p.want); got != p.want {
			t.Errorf("%s: %d spans, want %d", p.name, got, p.want)
		} else {
			t.Logf("%s: %d spans", p.name, got)
		}
	}

	// A process started after the attach is attached by the next scan;
	// the files of a and b, whose processes exited, are let go after
	// ReleaseScans scans.
	d := startCall(t, progD, n)
	s.Scan()
	if got, want := binaries(), []string{progA, filepath.Join(bSeen, "callprog"), progD}; !slices.Equal(got, want) {
		t.Fatalf("after one scan, traced in %v, want %v", got, want)
	}
	s.Scan()
	if got, want := binaries(), []string{progD}; !slices.Equal(got, want) {
		t.Fatalf("after two scans, traced in %v, want %v", got, want)
	}
	d.run(t)
	if got := spans(t, c, "multi_ret", calls*threads); got != calls*threads {
		t.Errorf("callprog2, started after the attach: %d spans, want %d", got, calls*threads)
	} else {
		t.Logf("callprog2, started after the attach: %d spans", got)
	}
	counts, err := s.Counts()
	if err != nil {
		t.Fatal(err)
	}
	if len(counts) != 0 {
		t.Errorf("counters %v, want none", counts)
	}
}

// TestProcessGo: two processes running one Go binary at once (as a
// process: glob finds a service's copies: one file, attached once), each
// calling main.handle from its main goroutine at the same depth. Their
// calls pair within each process: exactly the calls made, no unpaired
// return, no replaced entry. (Open calls are keyed by process as well
// as by g, since nothing keeps two processes' g addresses apart; this
// test passed before that too: no two g's met here.)
func TestProcessGo(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root (CAP_BPF, CAP_PERFMON, CAP_SYS_ADMIN) to load BPF and attach uprobes")
	}
	gobin := needGo(t)
	prog := filepath.Join(t.TempDir(), "argsgo")
	if out, err := exec.Command(gobin, "build", "-o", prog, "./testdata/argsgo").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v: %s", err, out)
	}
	c, err := collector.New(context.Background(), collector.Config{Sources: collector.Sources{Marker: true}, ScanInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()

	const calls = 20000
	var procs []*callProc
	for range 2 {
		procs = append(procs, startCall(t, prog, strconv.Itoa(calls)))
	}
	name, _ := glob.Compile("argsgo")
	fn, _ := glob.Compile("main.handle")
	s, err := Attach(context.Background(), c.SourceCore(), []Target{{Process: name, Functions: fn}})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if tr := s.Traced(); len(tr) != 1 || tr[0].Binary != prog {
		t.Fatalf("traced %+v, want main.handle in %s once (one file)", tr, prog)
	}
	if _, err := c.Snapshot(); err != nil { // a fresh window
		t.Fatal(err)
	}
	for _, p := range procs {
		io.WriteString(p.stdin, "go\n")
	}
	for _, p := range procs {
		if !p.out.Scan() || !strings.HasPrefix(p.out.Text(), "done") {
			t.Fatalf("program said %q, want done", p.out.Text())
		}
		if err := p.cmd.Wait(); err != nil {
			t.Fatalf("the traced program: %v", err)
		}
	}
	if got := spans(t, c, "main.handle", 2*calls); got != 2*calls {
		t.Errorf("main.handle: %d spans, want %d", got, 2*calls)
	} else {
		t.Logf("main.handle: %d spans in two processes of one binary", got)
	}
	counts, err := s.Counts()
	if err != nil {
		t.Fatal(err)
	}
	if len(counts) != 0 {
		t.Errorf("counters %v, want none (no unpaired return, no replaced entry)", counts)
	}
}
