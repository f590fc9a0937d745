//go:build linux

package userevents

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"io"
	"os"
	"strings"

	"golang.org/x/sys/unix"
)

// kernelConfigPaths are where the running kernel's configuration may be
// read, in order (/proc/config.gz needs CONFIG_IKCONFIG_PROC); a variable
// for tests.
var kernelConfigPaths = func() []string {
	var u unix.Utsname
	paths := []string{"/proc/config.gz"}
	if unix.Uname(&u) == nil {
		paths = append(paths, "/boot/config-"+unix.ByteSliceToString(u.Release[:]))
	}
	return paths
}

// kallsymsPath lists the kernel's symbols; every user may read their names
// (only the addresses are hidden). A variable for tests.
var kallsymsPath = "/proc/kallsyms"

// userEventsSymbol is a function of kernel/trace/trace_events_user.c that
// exists whenever user_events are built in: the ioctl of user_events_data.
const userEventsSymbol = "user_events_ioctl"

// kernelHasUserEvents tells, from what any user can read, whether the running
// kernel has user_events: its configuration when it can be read, otherwise
// its symbol names. It is for a process that may not look into tracefs and so
// cannot see whether user_events_data exists. known is false when neither
// could be read.
func kernelHasUserEvents() (has, known bool) {
	for _, p := range kernelConfigPaths() {
		if has, ok := configHas(p, "CONFIG_USER_EVENTS=y"); ok {
			return has, true
		}
	}
	f, err := os.Open(kallsymsPath)
	if err != nil {
		return false, false
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// "ffffffff81234560 t user_events_ioctl"
		line := sc.Bytes()
		if i := bytes.LastIndexByte(line, ' '); i >= 0 && string(line[i+1:]) == userEventsSymbol {
			return true, true
		}
	}
	if sc.Err() != nil {
		return false, false
	}
	return false, true
}

// configHas reports whether the kernel configuration at path (gzip'd when it
// ends in .gz) has the line want; ok is false when it cannot be read.
func configHas(path, want string) (has, ok bool) {
	f, err := os.Open(path)
	if err != nil {
		return false, false
	}
	defer f.Close()
	var r io.Reader = f
	if strings.HasSuffix(path, ".gz") {
		zr, err := gzip.NewReader(f)
		if err != nil {
			return false, false
		}
		defer zr.Close()
		r = zr
	}
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		if sc.Text() == want {
			return true, true
		}
	}
	if sc.Err() != nil {
		return false, false
	}
	return false, true
}

// KernelHas tells whether the running kernel has user_events, from what
// any user can read (its configuration, else its symbols); known is false
// when neither could be read. It does not look for tracefs: a kernel may
// have user_events while tracefs is not mounted yet.
func KernelHas() (has, known bool) { return kernelHasUserEvents() }
