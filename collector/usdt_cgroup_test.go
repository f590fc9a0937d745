//go:build linux

package collector

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	usdtsource "github.com/spanwatch/spanwatch/source/usdt"

	"github.com/spanwatch/spanwatch/internal/bpftest"
	"github.com/spanwatch/spanwatch/internal/usdt"
)

// cgroup2Root returns the mount point of the cgroup v2 hierarchy (the
// unified one on hybrid systems), or "" when there is none.
func cgroup2Root(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatalf("read mountinfo: %v", err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		// ID PARENT MAJ:MIN ROOT MOUNTPOINT OPTS... - FSTYPE SOURCE SUPER
		pre, post, ok := strings.Cut(line, " - ")
		if !ok {
			continue
		}
		f, g := strings.Fields(pre), strings.Fields(post)
		if len(f) >= 5 && len(g) >= 1 && g[0] == "cgroup2" && f[3] == "/" {
			return f[4]
		}
	}
	return ""
}

// newCgroup makes a cgroup v2 directory under root, removed at the end of
// the test, and returns its path and id (the directory's inode number, as
// bpf_get_current_cgroup_id reports it).
func newCgroup(t *testing.T, root, name string) (string, uint64) {
	t.Helper()
	dir := filepath.Join(root, fmt.Sprintf("spanwatch-test-%d-%s", os.Getpid(), name))
	if err := os.Mkdir(dir, 0o755); err != nil {
		if errors.Is(err, os.ErrPermission) || errors.Is(err, syscall.EROFS) {
			t.Skipf("cannot create a cgroup under %s: %v", root, err)
		}
		t.Fatalf("create cgroup: %v", err)
	}
	t.Cleanup(func() { os.Remove(dir) })
	var st syscall.Stat_t
	if err := syscall.Stat(dir, &st); err != nil {
		t.Fatal(err)
	}
	return dir, st.Ino
}

// TestUSDTCgroupMove runs spans from a process that the test moves between
// two cgroups between rounds (A, then B, then A again), and expects each
// round's spans in its cgroup's series: the fast path reads the cgroup from
// the task on every span, so a move counts from the next span on, as the
// bpf_get_current_cgroup_id helper of the other paths does.
func TestUSDTCgroupMove(t *testing.T) {
	prog := bpftest.CProgram(t, "cgmove")
	requireBPF(t)
	root := cgroup2Root(t)
	if root == "" {
		t.Skip("no cgroup v2 hierarchy mounted")
	}
	cgA, idA := newCgroup(t, root, "a")
	cgB, idB := newCgroup(t, root, "b")

	for _, tc := range []struct {
		name   string
		attach func(*Collector, []usdt.SpanSource, int) (*usdtsource.Source, error)
	}{
		// Thread-paired with a fixed name and no status: the fast path.
		{"fast", func(c *Collector, srcs []usdt.SpanSource, _ int) (*usdtsource.Source, error) {
			return usdtsource.Attach(context.Background(), c.SourceCore(), srcs)
		}},
		// Without cookies: the spec from the IP map (one process of a
		// PIE binary), no fast path.
		{"no-cookies", func(c *Collector, srcs []usdt.SpanSource, pid int) (*usdtsource.Source, error) {
			tr, err := usdt.NewTracer(usdt.TracerConfig{Maps: c.Maps(), Core: c.Kernel().Core, NoCookies: true})
			if err != nil {
				return nil, err
			}
			for _, s := range srcs {
				s.Binary, s.PID = "", pid
				if err := tr.Add(context.Background(), s); err != nil {
					tr.Close()
					return nil, err
				}
			}
			return &usdtsource.Source{Tracer: tr}, nil
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := New(context.Background(), Config{Sources: Sources{Marker: true}, ScanInterval: -1})
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			cmd := exec.Command(prog)
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
			tr, err := tc.attach(c, []usdt.SpanSource{{
				Binary: prog, Span: "cgmove", NameArg: -1, KeyArg: -1, StatusArg: -1, DurationArg: -1,
				Start: usdt.ProbeRef{Provider: "cg", Name: "start"}, End: usdt.ProbeRef{Provider: "cg", Name: "done"},
			}}, cmd.Process.Pid)
			if err != nil {
				t.Fatal(err)
			}
			defer tr.Close()
			if _, err := c.Snapshot(); err != nil { // start a fresh window
				t.Fatal(err)
			}

			pid := strconv.Itoa(cmd.Process.Pid)
			want := map[uint64]uint64{}
			for _, round := range []struct {
				cgroup string
				id     uint64
				spans  uint64
			}{{cgA, idA, 7}, {cgB, idB, 11}, {cgA, idA, 5}} {
				if err := os.WriteFile(filepath.Join(round.cgroup, "cgroup.procs"), []byte(pid), 0o644); err != nil {
					t.Skipf("cannot move a process into %s: %v", round.cgroup, err)
				}
				io.WriteString(stdin, strconv.FormatUint(round.spans, 10)+"\n")
				if !out.Scan() || out.Text() != "ok" {
					t.Fatalf("program said %q, want ok", out.Text())
				}
				want[round.id] += round.spans
			}
			stdin.Close()
			if err := cmd.Wait(); err != nil {
				t.Fatal(err)
			}

			s, err := c.Snapshot()
			if err != nil {
				t.Fatal(err)
			}
			got := map[uint64]uint64{}
			for _, sr := range s.Series {
				if sr.Span == "cgmove" && sr.Count > 0 {
					got[sr.CgroupID] += sr.Count
				}
			}
			if len(got) != len(want) || got[idA] != want[idA] || got[idB] != want[idB] {
				t.Errorf("spans by cgroup id = %v, want %v (A %d, B %d)", got, want, idA, idB)
			}
		})
	}
}

// TestServiceFromEnvironment runs a process alone in a cgroup of its own
// with service.name in its OTEL_RESOURCE_ATTRIBUTES (percent-encoded, as
// the OpenTelemetry SDKs read it): its series carry its executable's name
// as process and the declared service as service.
func TestServiceFromEnvironment(t *testing.T) {
	prog := bpftest.CProgram(t, "cgmove")
	requireBPF(t)
	root := cgroup2Root(t)
	if root == "" {
		t.Skip("no cgroup v2 hierarchy mounted")
	}
	cg, id := newCgroup(t, root, "svc")
	c, err := New(context.Background(), Config{Sources: Sources{Marker: true}, ScanInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	cmd := exec.Command(prog)
	cmd.Env = append(os.Environ(), "OTEL_RESOURCE_ATTRIBUTES=deployment.environment=test,service.name=checkout%2Dapi")
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
	if err := os.WriteFile(filepath.Join(cg, "cgroup.procs"), []byte(strconv.Itoa(cmd.Process.Pid)), 0o644); err != nil {
		t.Skipf("cannot move a process into %s: %v", cg, err)
	}
	tr, err := usdtsource.Attach(context.Background(), c.SourceCore(), []usdt.SpanSource{{
		Binary: prog, PID: cmd.Process.Pid, Span: "cgmove", NameArg: -1, KeyArg: -1, StatusArg: -1, DurationArg: -1,
		Start: usdt.ProbeRef{Provider: "cg", Name: "start"}, End: usdt.ProbeRef{Provider: "cg", Name: "done"},
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	io.WriteString(stdin, "9\n")
	if !out.Scan() || out.Text() != "ok" {
		t.Fatalf("program said %q, want ok", out.Text())
	}
	s, err := c.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, sr := range s.Series {
		if sr.Span != "cgmove" || sr.CgroupID != id {
			continue
		}
		found = true
		if sr.Count != 9 || sr.Process != filepath.Base(prog) || sr.Service != "checkout-api" {
			t.Errorf("series %d spans, process %q, service %q; want 9, %q, checkout-api", sr.Count, sr.Process, sr.Service, filepath.Base(prog))
		}
	}
	if !found {
		t.Errorf("no cgmove series in cgroup %d", id)
	}
}
