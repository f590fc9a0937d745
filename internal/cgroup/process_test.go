package cgroup

import (
	"bufio"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

func mustAtoi(t *testing.T, s string) int {
	t.Helper()
	n, err := strconv.Atoi(s)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// TestCommName checks the names taken from a comm the kernel kept.
func TestCommName(t *testing.T) {
	for _, tc := range []struct {
		comm []byte
		want string
	}{
		{[]byte("postgres\x00\x00\x00\x00\x00\x00\x00\x00"), "postgres"},
		{[]byte("0123456789abcde\x00"), "0123456789abcde"},
		{[]byte("no-terminator-16"), "no-terminator-16"},
		{[]byte("bad\x1bname\x00"), "bad?name"},
		{[]byte("\xff\xfe\x00"), "\uFFFD"},
		{[]byte("a\xffb\n\x00"), "a\uFFFDb"},
		{[]byte{0}, ""},
	} {
		if got := CommName(tc.comm); got != tc.want {
			t.Errorf("CommName(%q) = %q, want %q", tc.comm, got, tc.want)
		}
	}
}

// TestProcessName builds a fake /proc (exe symlinks, comm and environ
// files) and a cgroup directory listing its pids, and checks which name
// and service the cgroup gets.
func TestProcessName(t *testing.T) {
	type proc struct {
		pid, exe, comm string // exe "" means unreadable
		env            []string
	}
	svc := func(pid, exe, service string) proc {
		return proc{pid, exe, filepath.Base(exe), []string{"PATH=/bin", "OTEL_SERVICE_NAME=" + service}}
	}
	for _, tc := range []struct {
		name    string
		procs   []proc
		pids    string // cgroup.procs
		want    string
		service string
	}{
		{"one process", []proc{{"10", "/usr/bin/server", "server", nil}}, "10\n", "server", ""},
		{"workers of one binary", []proc{{"10", "/app/server", "server", nil}, {"11", "/app/server", "server", nil}}, "10\n11\n", "server", ""},
		{"two binaries", []proc{{"10", "/app/server", "server", nil}, {"11", "/bin/bash", "bash", nil}}, "10\n11\n", "", ""},
		{"exe unreadable: comm", []proc{{"10", "", "postgres", nil}}, "10\n", "postgres", ""},
		{"binary replaced on disk", []proc{{"10", "/usr/sbin/nginx (deleted)", "nginx", nil}}, "10\n", "nginx", ""},
		{"a pid that exited", []proc{{"10", "/app/server", "server", nil}}, "10\n12\n", "server", ""},
		{"empty cgroup", nil, "", "", ""},
		{"a declared service", []proc{svc("10", "/app/server", "checkout")}, "10\n", "server", "checkout"},
		{"two binaries, one service", []proc{svc("10", "/app/server", "checkout"), svc("11", "/app/worker", "checkout")}, "10\n11\n", "", "checkout"},
		{"a shell beside the service", []proc{svc("10", "/app/server", "checkout"), {"11", "/bin/sh", "sh", []string{"HOME=/"}}}, "10\n11\n", "", "checkout"},
		{"two services", []proc{svc("10", "/app/server", "checkout"), svc("11", "/app/server", "cart")}, "10\n11\n", "server", ""},
		{"resource attributes", []proc{{"10", "/app/server", "server", []string{"OTEL_RESOURCE_ATTRIBUTES=deployment.environment=prod,service.name=pay%20ments,k8s.pod.name=x"}}}, "10\n", "server", "pay ments"},
		{"OTEL_SERVICE_NAME wins", []proc{{"10", "/app/server", "server", []string{"OTEL_SERVICE_NAME=a", "OTEL_RESOURCE_ATTRIBUTES=service.name=b"}}}, "10\n", "server", "a"},
		{"a control character", []proc{svc("10", "/app/server", "bad\x1bname")}, "10\n", "server", ""},
		{"a control character in the file name", []proc{{"10", "/app/bad\x1bname", "bad", nil}}, "10\n", "bad?name", ""},
		{"a file name not UTF-8", []proc{{"10", "/app/s\xffrv", "s", nil}}, "10\n", "s\uFFFDrv", ""},
		{"a control-character name beside a service", []proc{{"10", "/app/server", "server", nil}, {"11", "/tmp/\x01", "x", nil}}, "10\n11\n", "", ""},
		{"too long", []proc{svc("10", "/app/server", strings.Repeat("x", maxServiceName+1))}, "10\n", "server", ""},
		{"beyond the read cap", []proc{{"10", "/app/server", "server", []string{"PAD=" + strings.Repeat("x", maxEnvironRead), "OTEL_SERVICE_NAME=hidden"}}}, "10\n", "server", ""},
		{"an overlong attributes entry", []proc{{"10", "/app/server", "server", []string{"OTEL_RESOURCE_ATTRIBUTES=a=" + strings.Repeat("x", maxEnvEntry) + ",service.name=x"}}}, "10\n", "server", ""},
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
				if p.env != nil {
					if err := os.WriteFile(filepath.Join(dir, "environ"), []byte(strings.Join(p.env, "\x00")+"\x00"), 0o644); err != nil {
						t.Fatal(err)
					}
				}
			}
			if err := os.WriteFile(filepath.Join(cg, "cgroup.procs"), []byte(tc.pids), 0o644); err != nil {
				t.Fatal(err)
			}
			if got, service := ProcessName(procRoot, cg); got != tc.want || service != tc.service {
				t.Errorf("ProcessName = %q, %q; want %q, %q", got, service, tc.want, tc.service)
			}
			// Processes says several where the pids run more than one
			// executable; Process names each pid as ProcessName does.
			exes := map[string]bool{}
			for _, p := range tc.procs {
				name := strings.TrimSuffix(filepath.Base(p.exe), " (deleted)")
				if p.exe == "" {
					name = p.comm
				}
				name = cleanName(name)
				exes[name] = true
				gotName, gotService := Process(procRoot, uint32(mustAtoi(t, p.pid)))
				// A process alone is named as its cgroup is.
				if gotName != name || (len(tc.procs) == 1 && gotService != tc.service) {
					t.Errorf("Process(%s) = %q, %q; want %q (service %q alone)", p.pid, gotName, gotService, name, tc.service)
				}
			}
			if _, _, several := Processes(procRoot, cg); several != (len(exes) > 1) || Several(procRoot, cg) != several {
				t.Errorf("Processes says several %v, Several %v, for executables %v", several, Several(procRoot, cg), exes)
			}
		})
	}
	if got, service := ProcessName(t.TempDir(), filepath.Join(t.TempDir(), "missing")); got != "" || service != "" {
		t.Errorf("ProcessName(missing cgroup) = %q, %q", got, service)
	}
}

// TestServiceFromEnvironSmallBuffer reads environments through a buffer
// smaller than their entries, as a long OTEL_RESOURCE_ATTRIBUTES meets
// the reader's 4 KiB one.
func TestServiceFromEnvironSmallBuffer(t *testing.T) {
	long := "OTEL_RESOURCE_ATTRIBUTES=" + strings.Repeat("k=v,", 40) + "service.name=deep\x00"
	for _, tc := range []struct{ env, want string }{
		{"A=1\x00" + long, "deep"},
		{long + "OTEL_SERVICE_NAME=first\x00", "first"},
		{"OTEL_SERVICE_NAME=\x00" + long, "deep"},
		{"OTEL_SERVICE_NAME=last", "last"}, // no NUL at the end
	} {
		if got := serviceFromEnviron(bufio.NewReaderSize(strings.NewReader(tc.env), 16)); got != tc.want {
			t.Errorf("%q: %q, want %q", tc.env, got, tc.want)
		}
	}
}
