package source

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// A Process is one process a scan of /proc found.
type Process struct {
	PID int
	Dir string // its directory in procfs, /proc/PID
}

// ReleaseScans is how many scans of /proc in a row must find no process
// running a binary before the sources that attach by process
// (source/marker, and source/function's process: targets) let it go:
// two, so a binary whose process is replaced by another while /proc is
// being read (an exec, a restart) keeps its uprobes.
const ReleaseScans = 2

// Processes lists the processes in procRoot (/proc, or where tests put
// it): the one walk of /proc of the sources that find binaries by the
// processes running them, each scan interval (Core.ScanInterval).
func Processes(procRoot string) ([]Process, error) {
	ents, err := os.ReadDir(procRoot)
	if err != nil {
		return nil, err
	}
	out := make([]Process, 0, len(ents))
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid <= 0 {
			continue
		}
		out = append(out, Process{PID: pid, Dir: filepath.Join(procRoot, e.Name())})
	}
	return out, nil
}

// Exe returns the path of the executable the process in procfs
// directory dir runs, as its /proc/PID/exe link names it (the kernel's
// path of the file, from the root of the mount namespace it was found
// in: inside a container, the path the container sees), without the
// " (deleted)" the kernel appends for a file removed since; false for a
// kernel thread or a process that is gone. Reading the link touches no
// file system. The name is a hint for matching only: a file is opened
// through /proc/PID/exe itself, never by this path.
func Exe(dir string) (string, bool) {
	p, err := os.Readlink(filepath.Join(dir, "exe"))
	if err != nil || p == "" {
		return "", false
	}
	return strings.TrimSuffix(p, " (deleted)"), true
}

// Every calls scan every interval until ctx ends: the periodic /proc scan
// of the sources that attach by process (source/marker, source/function's
// process: targets).
func Every(ctx context.Context, interval time.Duration, scan func()) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			scan()
		}
	}
}
