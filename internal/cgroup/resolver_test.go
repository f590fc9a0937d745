//go:build linux

package cgroup

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestResolverTree checks walking, the id -> path map and the rate-limited
// refresh on an ordinary directory tree, where the inode numbers play the
// cgroup ids' part.
func TestResolverTree(t *testing.T) {
	root := t.TempDir()
	const id = "3f4b8c2a9d1e7f6a5b4c3d2e1f0a9b8c7d6e5f4a3b2c1d0e9f8a7b6c5d4e3f2a"
	mk := func(rel string) uint64 {
		t.Helper()
		p := filepath.Join(root, rel)
		if err := os.MkdirAll(p, 0o755); err != nil {
			t.Fatal(err)
		}
		ino, err := ID(p)
		if err != nil {
			t.Fatal(err)
		}
		return ino
	}
	svc := mk("system.slice/nginx.service")
	ctr := mk("system.slice/docker-" + id + ".scope")
	if err := os.WriteFile(filepath.Join(root, "system.slice", "cgroup.procs"), nil, 0o644); err != nil {
		t.Fatal(err)
	}

	r, err := NewResolver(Config{Root: root, MinRefresh: time.Hour, Names: noNames()})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	r.now = func() time.Time { return now }

	rootID, _ := ID(root)
	for _, tc := range []struct {
		id   uint64
		want Info
	}{
		{rootID, Info{Path: "/"}},
		{svc, Info{Path: "/system.slice/nginx.service", Unit: "nginx.service"}},
		{ctr, Info{Path: "/system.slice/docker-" + id + ".scope", ContainerID: id}},
	} {
		if got := r.Resolve(tc.id); got != tc.want {
			t.Errorf("Resolve(%d) = %+v, want %+v", tc.id, got, tc.want)
		}
	}
	if w := r.Walks(); w != 1 {
		t.Fatalf("walks after known lookups = %d, want 1", w)
	}

	// A new cgroup is unknown until a walk; within MinRefresh of the last
	// walk, a miss does not walk again.
	fresh := mk("system.slice/fresh.service")
	if got := r.Resolve(fresh); got != (Info{}) {
		t.Fatalf("Resolve(new id) within MinRefresh = %+v, want empty", got)
	}
	if w := r.Walks(); w != 1 {
		t.Fatalf("walks after a rate-limited miss = %d, want 1", w)
	}
	now = now.Add(time.Hour)
	want := Info{Path: "/system.slice/fresh.service", Unit: "fresh.service"}
	if got := r.Resolve(fresh); got != want {
		t.Fatalf("Resolve(new id) after MinRefresh = %+v, want %+v", got, want)
	}
	if w := r.Walks(); w != 2 {
		t.Fatalf("walks after a miss past MinRefresh = %d, want 2", w)
	}
	// Many misses in a burst cost one walk at most.
	now = now.Add(time.Hour)
	for i := range 1000 {
		r.Resolve(uint64(1<<40 + i))
	}
	if w := r.Walks(); w != 3 {
		t.Fatalf("walks after 1000 misses = %d, want 3", w)
	}
	// A removed cgroup drops out on the next walk.
	if err := os.Remove(filepath.Join(root, "system.slice/fresh.service")); err != nil {
		t.Fatal(err)
	}
	if err := r.Refresh(); err != nil {
		t.Fatal(err)
	}
	r.now = func() time.Time { return now } // no walk on the next miss
	if got := r.Resolve(fresh); got != (Info{}) {
		t.Fatalf("Resolve(removed id) = %+v, want empty", got)
	}
}

func TestNewResolverBadRoot(t *testing.T) {
	_, err := NewResolver(Config{Root: filepath.Join(t.TempDir(), "missing")})
	if !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("NewResolver(missing root) error = %v, want ErrNotExist", err)
	}
}

// TestResolverRealCgroup creates a cgroup in the host's cgroup2 mount, moves
// a child process into it, and checks that the id the process's cgroup has
// resolves to the path /proc/PID/cgroup shows.
func TestResolverRealCgroup(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("creating a cgroup needs root")
	}
	root, err := FindRoot()
	if err != nil {
		t.Skipf("no cgroup2 mount: %v", err)
	}
	name := fmt.Sprintf("spanwatch-test-%d.slice", os.Getpid())
	dir := filepath.Join(root, name, "probe.service")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Skipf("cannot create a cgroup under %s: %v", root, err)
	}
	t.Cleanup(func() {
		os.Remove(dir)
		os.Remove(filepath.Join(root, name))
	})

	r, err := NewResolver(Config{Root: root, MinRefresh: time.Millisecond, Names: noNames()})
	if err != nil {
		t.Fatal(err)
	}

	cmd := exec.Command("sleep", "60")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := false
	defer func() {
		if !exited {
			cmd.Process.Kill()
			cmd.Wait()
		}
	}()
	pid := cmd.Process.Pid
	if err := os.WriteFile(filepath.Join(dir, "cgroup.procs"), []byte(strconv.Itoa(pid)), 0o644); err != nil {
		t.Fatalf("move pid %d into %s: %v", pid, dir, err)
	}
	wantPath := "/" + name + "/probe.service"
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), "0::"+wantPath+"\n") {
		t.Fatalf("/proc/%d/cgroup = %q, want the v2 line 0::%s", pid, b, wantPath)
	}

	id, err := ID(dir)
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(2 * time.Millisecond) // past MinRefresh: the miss walks
	want := Info{Path: wantPath, Unit: "probe.service", Process: "sleep"}
	if got := r.Resolve(id); got != want {
		t.Fatalf("Resolve(%d) = %+v, want %+v", id, got, want)
	}

	// The cgroup can go once its process has exited.
	cmd.Process.Kill()
	cmd.Wait()
	exited = true
	for i := 0; ; i++ {
		err := os.Remove(dir)
		if err == nil {
			break
		}
		if i == 100 {
			t.Fatalf("remove cgroup %s: %v", dir, err)
		}
		time.Sleep(10 * time.Millisecond) // the exit reaches the cgroup asynchronously
	}
}

func TestFindRootEnv(t *testing.T) {
	root, err := FindRoot()
	if err != nil {
		t.Skipf("no cgroup2 mount: %v", err)
	}
	t.Setenv(RootEnv, root)
	if got, err := FindRoot(); err != nil || got != root {
		t.Fatalf("FindRoot with %s=%s: %q, %v", RootEnv, root, got, err)
	}
	t.Setenv(RootEnv, t.TempDir())
	if got, err := FindRoot(); err == nil {
		t.Fatalf("FindRoot with %s naming a plain directory: %q, want an error", RootEnv, got)
	}
}

// noNames is a Names that reads nothing of the host's.
func noNames() *Names {
	return NewNames(NamesConfig{PodLogDir: "-", ContainerLogDir: "-", CRIConfigs: []string{"-"}})
}
