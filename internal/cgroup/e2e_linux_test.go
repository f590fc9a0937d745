//go:build linux

package cgroup_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/spanwatch/spanwatch/collector"
	"github.com/spanwatch/spanwatch/emit"
	"github.com/spanwatch/spanwatch/internal/cgroup"
	"github.com/spanwatch/spanwatch/snapshot"
)

// childEnv makes this test binary a span emitter: for each line "N NAME
// DURATION" on stdin it records N spans, then prints "ok".
const childEnv = "SPANWATCH_CGROUP_TEST_CHILD"

func TestMain(m *testing.M) {
	if os.Getenv(childEnv) == "1" {
		child()
		return
	}
	os.Exit(m.Run())
}

func child() {
	fmt.Println("ready")
	sc := bufio.NewScanner(os.Stdin)
	for sc.Scan() {
		var n int
		var name, ds string
		_, err := fmt.Sscan(sc.Text(), &n, &name, &ds)
		d, derr := time.ParseDuration(ds)
		if err != nil || derr != nil {
			fmt.Println("bad line:", sc.Text())
			os.Exit(2)
		}
		if !emit.Enabled() {
			fmt.Println("not enabled")
			continue
		}
		for range n {
			emit.Record(&emit.Finished{Name: name, Duration: d})
		}
		fmt.Println("ok")
	}
}

// TestNamesOnSeries runs a process that emits spans (through the span
// SDK's marker, attached by a real collector) in a cgroup laid out as the
// kubelet lays out a pod's container (systemd driver, containerd), with
// the kubelet's pod log directory for that pod in a temporary directory,
// and checks that its series and its overruns carry the namespace, pod and
// container names, the ids, and the process name.
func TestNamesOnSeries(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: creating cgroups and loading BPF")
	}
	if emit.Mode() != "marker" {
		t.Skipf("the span SDK uses %s here, not the marker (the VM tests cover user_events)", emit.Mode())
	}
	root, err := cgroup.FindRoot()
	if err != nil {
		t.Skipf("no cgroup2 mount: %v", err)
	}
	const (
		uid = "5e1f0c2d-7a3b-4c5d-9e8f-0a1b2c3d4e5f"
		id  = "9d8c7b6a5f4e3d2c1b0a99887766554433221100ffeeddccbbaa998877665544"
	)
	top := filepath.Join(root, fmt.Sprintf("spanwatch-test-%d.slice", os.Getpid()))
	rel := filepath.Join("kubepods.slice", "kubepods-burstable.slice",
		"kubepods-burstable-pod"+strings.ReplaceAll(uid, "-", "_")+".slice", "cri-containerd-"+id+".scope")
	dir := filepath.Join(top, rel)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Skipf("cannot create a cgroup under %s: %v", root, err)
	}
	t.Cleanup(func() {
		// Leaves first; a cgroup goes once its processes are gone.
		for d := dir; d != root; d = filepath.Dir(d) {
			for i := 0; os.Remove(d) != nil && i < 100; i++ {
				time.Sleep(10 * time.Millisecond)
			}
		}
	})

	node := t.TempDir()
	podDir := filepath.Join(node, "pods", "shop_checkout-7d9f8b6c5-x2x9z_"+uid, "server")
	if err := os.MkdirAll(podDir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(podDir, "0.log"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	res, err := cgroup.NewResolver(cgroup.Config{
		Root:       root,
		MinRefresh: time.Millisecond,
		Names: cgroup.NewNames(cgroup.NamesConfig{
			PodLogDir: filepath.Join(node, "pods"), ContainerLogDir: "-", CRIConfigs: []string{"-"},
			MinRefresh: time.Millisecond,
		}),
	})
	if err != nil {
		t.Fatal(err)
	}

	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	col, err := collector.New(context.Background(), collector.Config{
		Sources:        collector.Sources{Marker: true},
		MarkerBinaries: []string{exe},
		ScanInterval:   -1,
		Resolver:       res,
	})
	if err != nil {
		t.Fatal(err)
	}
	defer col.Close()
	if err := col.SetBudgets([]collector.BudgetRule{{Span: "names.slow", Budget: time.Millisecond}}); err != nil {
		t.Fatal(err)
	}

	cmd := exec.Command(exe)
	cmd.Env = append(os.Environ(), childEnv+"=1")
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
	defer func() {
		stdin.Close()
		cmd.Process.Kill()
		cmd.Wait()
	}()
	out := bufio.NewReader(stdout)
	expect := func(want string) {
		t.Helper()
		line, err := out.ReadString('\n')
		if err != nil && err != io.EOF {
			t.Fatal(err)
		}
		if strings.TrimSpace(line) != want {
			t.Fatalf("child said %q, want %q", line, want)
		}
	}
	expect("ready")
	if err := os.WriteFile(filepath.Join(dir, "cgroup.procs"), []byte(strconv.Itoa(cmd.Process.Pid)), 0o644); err != nil {
		t.Fatalf("move the child into %s: %v", dir, err)
	}
	if _, err := col.Snapshot(); err != nil { // a fresh window
		t.Fatal(err)
	}
	fmt.Fprintln(stdin, "100 names.e2e 2ms")
	expect("ok")
	fmt.Fprintln(stdin, "1 names.slow 50ms")
	expect("ok")

	wantID, err := cgroup.ID(dir)
	if err != nil {
		t.Fatal(err)
	}
	want := snapshot.Series{
		Span: "names.e2e", CgroupID: wantID, Identity: snapshot.Identity{Cgroup: "/" + filepath.Base(top) + "/" + rel, ContainerID: id, PodUID: uid, Namespace: "shop", Pod: "checkout-7d9f8b6c5-x2x9z", Container: "server", Process: filepath.Base(exe)},
	}
	var ov *snapshot.Overrun
	var got *snapshot.Series
	for i := 0; i < 50 && (ov == nil || got == nil); i++ {
		s, err := col.Snapshot()
		if err != nil {
			t.Fatal(err)
		}
		for j := range s.Series {
			if s.Series[j].Span == want.Span && s.Series[j].Count > 0 {
				got = &s.Series[j]
			}
		}
		for j := range s.Overruns {
			if s.Overruns[j].Span == "names.slow" {
				ov = &s.Overruns[j]
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	if got == nil {
		t.Fatal("no series names.e2e from the child")
	}
	if got.Count != 100 || got.SumNs != 100*uint64(2*time.Millisecond) {
		t.Errorf("count = %d, sum = %d ns, want 100 spans of 2ms", got.Count, got.SumNs)
	}
	labels := func(s *snapshot.Series) string {
		return fmt.Sprintf("cgroup_id=%d cgroup=%s container_id=%s pod_uid=%s unit=%q namespace=%s pod=%s container=%s process=%s",
			s.CgroupID, s.Cgroup, s.ContainerID, s.PodUID, s.Unit, s.Namespace, s.Pod, s.Container, s.Process)
	}
	if labels(got) != labels(&want) {
		t.Errorf("series labels\n got  %s\n want %s", labels(got), labels(&want))
	}
	if ov == nil {
		t.Fatal("no overrun of names.slow from the child")
	}
	if ov.Namespace != "shop" || ov.Pod != want.Pod || ov.Container != "server" || ov.ContainerID != id || ov.PodUID != uid {
		t.Errorf("overrun names = %s/%s/%s (%s, %s), want shop/%s/server", ov.Namespace, ov.Pod, ov.Container, ov.ContainerID, ov.PodUID, want.Pod)
	}
	if ov.PID != uint32(cmd.Process.Pid) {
		t.Errorf("overrun pid = %d, want the child's %d", ov.PID, cmd.Process.Pid)
	}
}
