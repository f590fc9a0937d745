package cgroup

import (
	"os"
	"path/filepath"
	"testing"
)

// TestProcessName builds a fake /proc (exe symlinks, comm files) and a
// cgroup directory listing its pids, and checks which name the cgroup gets.
func TestProcessName(t *testing.T) {
	type proc struct {
		pid, exe, comm string // exe "" means unreadable
	}
	for _, tc := range []struct {
		name  string
		procs []proc
		pids  string // cgroup.procs
		want  string
	}{
		{"one process", []proc{{"10", "/usr/bin/server", "server"}}, "10\n", "server"},
		{"workers of one binary", []proc{{"10", "/app/server", "server"}, {"11", "/app/server", "server"}}, "10\n11\n", "server"},
		{"two binaries", []proc{{"10", "/app/server", "server"}, {"11", "/bin/bash", "bash"}}, "10\n11\n", ""},
		{"exe unreadable: comm", []proc{{"10", "", "postgres"}}, "10\n", "postgres"},
		{"binary replaced on disk", []proc{{"10", "/usr/sbin/nginx (deleted)", "nginx"}}, "10\n", "nginx"},
		{"a pid that exited", []proc{{"10", "/app/server", "server"}}, "10\n12\n", "server"},
		{"empty cgroup", nil, "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			procRoot, cg := t.TempDir(), t.TempDir()
			for _, p := range tc.procs {
				dir := filepath.Join(procRoot, p.pid)
				if err := os.MkdirAll(dir, 0o755); err != nil {
					t.Fatal(err)
				}
				if p.exe != "" {
					if err := os.Symlink(p.exe, filepath.Join(dir, "exe")); err != nil {
						t.Fatal(err)
					}
				}
				if err := os.WriteFile(filepath.Join(dir, "comm"), []byte(p.comm+"\n"), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			if err := os.WriteFile(filepath.Join(cg, "cgroup.procs"), []byte(tc.pids), 0o644); err != nil {
				t.Fatal(err)
			}
			if got := ProcessName(procRoot, cg); got != tc.want {
				t.Errorf("ProcessName = %q, want %q", got, tc.want)
			}
		})
	}
	if got := ProcessName(t.TempDir(), filepath.Join(t.TempDir(), "missing")); got != "" {
		t.Errorf("ProcessName(missing cgroup) = %q", got)
	}
}
