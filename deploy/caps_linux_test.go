//go:build linux

package deploy

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/spanwatch/spanwatch/collector"
	"github.com/spanwatch/spanwatch/snapshot"
)

// capBits maps the capabilities the deployments grant to their numbers.
var capBits = map[string]uint{"CAP_BPF": unix.CAP_BPF, "CAP_PERFMON": unix.CAP_PERFMON, "CAP_SYS_ADMIN": unix.CAP_SYS_ADMIN, "CAP_SYS_PTRACE": unix.CAP_SYS_PTRACE}

// setprivArgs limits a command to caps: root's uid keeps only these
// capabilities (the bounding set caps what exec grants root), nothing
// inherited or ambient.
func setprivArgs(caps []string) []string {
	bset := "-all"
	for _, c := range caps {
		bset += ",+" + strings.ToLower(strings.TrimPrefix(c, "CAP_"))
	}
	return []string{"--bounding-set", bset, "--inh-caps", "-all", "--ambient-caps", "-all", "--"}
}

// TestRunWithDeployedCapabilities runs spanwatch run with exactly the
// capabilities the manifest and the unit grant, against the go-http example
// as the traced service, and checks that spans, budgets and stacks all
// work; that without CAP_PERFMON it refuses to start, saying why; and that
// the perf_uprobe path of kernels before 6.6 works with CAP_SYS_ADMIN added
// and fails, naming it, without.
func TestRunWithDeployedCapabilities(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to run spanwatch with a reduced capability set")
	}
	setpriv, err := exec.LookPath("setpriv")
	if err != nil {
		t.Skip("setpriv not installed (Debian package util-linux)")
	}
	bin := spanwatchBinary(t)
	dir := t.TempDir()
	example := filepath.Join(dir, "go-http")
	if out, err := exec.Command("go", "build", "-o", example, "../examples/go-http").CombinedOutput(); err != nil {
		t.Fatalf("build examples/go-http: %v\n%s", err, out)
	}
	config := filepath.Join(dir, "rules.yaml")
	os.WriteFile(config, []byte("budgets:\n  - span: payment.charge\n    budget: 100ms\n"), 0o644)

	// CAP_SYS_ADMIN implies CAP_PERFMON (and CAP_BPF) to the kernel, so
	// this run has neither.
	t.Run("without CAP_PERFMON", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		args := append(setprivArgs([]string{"CAP_BPF", "CAP_SYS_PTRACE"}), bin, "run", "--config", config)
		out, err := exec.CommandContext(ctx, setpriv, args...).CombinedOutput()
		if err == nil || !strings.Contains(string(out), "CAP_PERFMON") {
			t.Fatalf("spanwatch run without CAP_PERFMON: %v, output:\n%s\nwant a failure naming CAP_PERFMON", err, out)
		}
	})

	// The deployed set: uprobes through uprobe_multi links (6.6+).
	t.Run("deployed", func(t *testing.T) {
		if !collector.HaveUprobeMulti() {
			t.Skip("kernel without uprobe_multi links (6.6+): uprobes go through the perf_uprobe PMU, which needs CAP_SYS_ADMIN besides the deployed set (see README)")
		}
		res, err := runAgent(t, setpriv, bin, example, config, wantCaps)
		if err != nil {
			t.Fatal(err)
		}
		res.check(t)
	})
	// What kernels before 6.6 need: uprobes through the perf_uprobe PMU,
	// forced here with --no-uprobe-multi, and CAP_SYS_ADMIN for it.
	t.Run("perf uprobes with CAP_SYS_ADMIN", func(t *testing.T) {
		res, err := runAgent(t, setpriv, bin, example, config, append([]string{"CAP_SYS_ADMIN"}, wantCaps...), "--no-uprobe-multi")
		if err != nil {
			t.Fatal(err)
		}
		res.check(t)
	})
	// And that CAP_SYS_ADMIN is what the perf path needs: without it the
	// agent stops, saying so.
	t.Run("perf uprobes without CAP_SYS_ADMIN", func(t *testing.T) {
		_, err := runAgent(t, setpriv, bin, example, config, wantCaps, "--no-uprobe-multi")
		if err == nil || !strings.Contains(err.Error(), "CAP_SYS_ADMIN") {
			t.Fatalf("spanwatch run --no-uprobe-multi without CAP_SYS_ADMIN: %v; want a start-up failure naming CAP_SYS_ADMIN", err)
		}
	})
}

// agentRun is what one run of spanwatch run under a capability set saw.
type agentRun struct {
	count, over uint64
	overruns    []snapshot.Overrun
}

// runAgent runs spanwatch run as root's uid with only caps, with the go-http
// example as the traced service, sends it 50 checkouts and collects the
// payment.charge spans from the agent's snapshots. A start-up failure is
// returned with the agent's log.
func runAgent(t *testing.T, setpriv, bin, example, config string, caps []string, extra ...string) (agentRun, error) {
	t.Helper()
	var res agentRun
	// The traced service, on the marker path this kernel supports.
	svc := exec.Command(example, "-listen", "127.0.0.1:0")
	svc.Env = append(os.Environ(), "SPANWATCH_EMIT=marker")
	svcErr, _ := svc.StderrPipe()
	if err := svc.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { svc.Process.Kill(); svc.Wait() }()
	url := ""
	sc := bufio.NewScanner(svcErr)
	for url == "" && sc.Scan() {
		if m := regexp.MustCompile(`serving on (http://\S+)`).FindStringSubmatch(sc.Text()); m != nil {
			url = m[1]
		}
	}
	if url == "" {
		t.Fatal("go-http did not start")
	}
	go io.Copy(io.Discard, svcErr)

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	args := append(setprivArgs(caps), bin, "run", "--config", config, "--interval", "1s", "--output", "-", "--source", "marker", "--binary", example)
	args = append(args, extra...)
	agent := exec.CommandContext(ctx, setpriv, args...)
	agent.Cancel = func() error { return agent.Process.Signal(os.Interrupt) }
	var logs bytes.Buffer
	agent.Stderr = &logs
	stdout, _ := agent.StdoutPipe()
	if err := agent.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		cancel()
		agent.Wait()
		if t.Failed() {
			t.Logf("spanwatch run's log:\n%s", logs.String())
		}
	}()

	// The agent holds exactly the deployed capabilities.
	time.Sleep(300 * time.Millisecond)
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", agent.Process.Pid))
	if err != nil {
		t.Fatal(err)
	}
	var want uint64
	for _, c := range caps {
		want |= 1 << capBits[c]
	}
	m := regexp.MustCompile(`CapEff:\s+([0-9a-f]+)`).FindSubmatch(status)
	if m == nil {
		t.Fatalf("no CapEff in /proc/PID/status")
	}
	if eff, _ := strconv.ParseUint(string(m[1]), 16, 64); eff != want {
		t.Fatalf("agent's effective capabilities %#x, want %#x (%v)", eff, want, caps)
	}

	lines := make(chan []byte)
	go func() {
		sc := bufio.NewScanner(stdout)
		sc.Buffer(nil, 16<<20)
		for sc.Scan() {
			lines <- append([]byte(nil), sc.Bytes()...)
		}
		close(lines)
	}()
	// Requests start once the first snapshot shows the agent is attached.
	select {
	case _, ok := <-lines:
		if !ok {
			agent.Wait()
			return res, fmt.Errorf("spanwatch run exited before its first snapshot:\n%s", logs.String())
		}
	case <-time.After(15 * time.Second):
		t.Fatal("no snapshot within 15s")
	}
	for range 50 {
		resp, err := http.Get(url + "/checkout")
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	deadline := time.After(15 * time.Second)
	for res.count < 50 || len(res.overruns) == 0 {
		select {
		case line, ok := <-lines:
			if !ok {
				t.Fatal("spanwatch run exited")
			}
			var s snapshot.Snapshot
			if err := json.Unmarshal(line, &s); err != nil {
				t.Fatalf("snapshot line: %v", err)
			}
			for _, sr := range s.Series {
				if sr.Span == "payment.charge" {
					res.count += sr.Count
					res.over += sr.OverBudget
				}
			}
			for _, o := range s.Overruns {
				// Samples of the span while it ran (the in-flight
				// sampler) come as still_running records: the test
				// wants the span's end.
				if !o.StillRunning {
					res.overruns = append(res.overruns, o)
				}
			}
		case <-deadline:
			t.Fatalf("after 15s: %d payment.charge spans, %d overruns; want 50 and 1", res.count, len(res.overruns))
		}
	}
	return res, nil
}

// check asserts a run counted every span, the one over budget, and a stack
// that names the slow function.
func (res agentRun) check(t *testing.T) {
	t.Helper()
	if res.count != 50 || res.over != 1 || len(res.overruns) != 1 {
		t.Fatalf("%d payment.charge spans, %d over budget, %d overruns; want 50, 1, 1", res.count, res.over, len(res.overruns))
	}
	var funcs []string
	for _, f := range res.overruns[0].UserStack {
		funcs = append(funcs, f.Function)
	}
	if !strings.Contains(strings.Join(funcs, " "), "main.chargeCard") {
		t.Errorf("overrun stack %v does not name main.chargeCard: symbolization failed with the deployed capabilities", funcs)
	}
}
