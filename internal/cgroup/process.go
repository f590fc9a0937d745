package cgroup

import (
	"bufio"
	"bytes"
	"os"
	"path/filepath"
	"strings"
)

// maxProcsRead bounds how many processes of one cgroup are looked at: a
// cgroup with more than one executable is told apart within the first few,
// and the root cgroup can hold thousands.
const maxProcsRead = 256

// ProcessName returns the executable name shared by every process in the
// cgroup directory dir (the base name of /proc/PID/exe, or /proc/PID/comm
// where exe cannot be read), read under procRoot. It returns "" when the
// cgroup has no process, or processes of more than one executable: then
// the node cannot tell which of them a span came from, since the kernel's
// aggregates are keyed by cgroup, not by process.
func ProcessName(procRoot, dir string) string {
	f, err := os.Open(filepath.Join(dir, "cgroup.procs"))
	if err != nil {
		return ""
	}
	defer f.Close()
	name := ""
	sc := bufio.NewScanner(f)
	for n := 0; sc.Scan() && n < maxProcsRead; n++ {
		pid := strings.TrimSpace(sc.Text())
		if pid == "" {
			continue
		}
		exe := exeName(procRoot, pid)
		switch {
		case exe == "":
			// The process exited, or is a kernel thread: it emits no
			// spans.
		case name == "":
			name = exe
		case exe != name:
			return ""
		}
	}
	return name
}

// exeName returns the base name of a process's executable. Reading
// /proc/PID/exe of another user's process needs CAP_SYS_PTRACE; without it
// the command name (comm, at most 15 bytes) stands in.
func exeName(procRoot, pid string) string {
	if p, err := os.Readlink(filepath.Join(procRoot, pid, "exe")); err == nil {
		// A binary replaced on disk reads "/path/name (deleted)".
		return filepath.Base(strings.TrimSuffix(p, " (deleted)"))
	}
	b, err := os.ReadFile(filepath.Join(procRoot, pid, "comm"))
	if err != nil {
		return ""
	}
	return string(bytes.TrimSpace(b))
}
