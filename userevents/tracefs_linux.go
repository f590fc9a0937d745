//go:build linux

package userevents

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"golang.org/x/sys/unix"
)

// tracefsMagic is TRACEFS_MAGIC from include/uapi/linux/magic.h.
const tracefsMagic = 0x74726163

// tracefsPaths are where tracefs is found, in order: its own mount point
// (kernel 4.1+) and the automount under debugfs.
var tracefsPaths = []string{"/sys/kernel/tracing", "/sys/kernel/debug/tracing"}

var tracefs struct {
	sync.Mutex
	dir string
}

// TracefsDir returns the directory where tracefs is mounted. When it is not
// mounted (many systems don't mount it at boot), TracefsDir mounts it on
// /sys/kernel/tracing if the process may (CAP_SYS_ADMIN), and otherwise
// returns an error that says the command to run. A kernel without tracefs
// gives an error wrapping ErrNotSupported.
func TracefsDir() (string, error) {
	tracefs.Lock()
	defer tracefs.Unlock()
	if tracefs.dir != "" {
		return tracefs.dir, nil
	}
	dir, err := locateTracefs()
	if err != nil {
		return "", err
	}
	tracefs.dir = dir
	return dir, nil
}

// locateTracefs finds tracefs or mounts it.
func locateTracefs() (string, error) {
	for _, dir := range tracefsPaths {
		if isTracefs(dir) {
			return dir, nil
		}
	}
	dir := tracefsPaths[0]
	if _, err := os.Stat(dir); errors.Is(err, os.ErrNotExist) {
		// The kernel creates the mount point when it has tracefs.
		return "", fmt.Errorf("tracefs: %s does not exist, the kernel has no tracefs (CONFIG_TRACING): %w", dir, ErrNotSupported)
	}
	switch err := unix.Mount("nodev", dir, "tracefs", 0, ""); {
	case err == nil:
	case errors.Is(err, unix.EPERM) || errors.Is(err, unix.EACCES):
		return "", fmt.Errorf("tracefs is not mounted and mounting it needs root; run: sudo mount -t tracefs nodev %s: %w", dir, err)
	case errors.Is(err, unix.ENODEV):
		return "", fmt.Errorf("mount tracefs on %s: the kernel has no tracefs (CONFIG_TRACING): %w", dir, ErrNotSupported)
	default:
		return "", fmt.Errorf("tracefs is not mounted; mount -t tracefs nodev %s: %w", dir, err)
	}
	if !isTracefs(dir) {
		return "", fmt.Errorf("mounted tracefs on %s but it does not show there", dir)
	}
	return dir, nil
}

func isTracefs(dir string) bool {
	var st unix.Statfs_t
	return unix.Statfs(dir, &st) == nil && st.Type == tracefsMagic
}

// dataFile returns the path of user_events_data, or an error wrapping
// ErrNotSupported when tracefs is mounted but the kernel has no user_events.
func dataFile() (string, error) {
	dir, err := TracefsDir()
	if err != nil {
		return "", err
	}
	path := filepath.Join(dir, "user_events_data")
	_, err = os.Stat(path)
	return path, checkDataFile(path, err)
}

// checkDataFile turns the error of stat'ing user_events_data into the
// error dataFile returns: nil when the file is there or cannot be seen by
// this user on a kernel that may have it. A user who may not look into
// tracefs (mode 0700 on most systems) cannot see whether the file exists;
// then the kernel's configuration or symbols tell, so that such a user is
// not told to change the permissions of a file the kernel does not have.
func checkDataFile(path string, statErr error) error {
	switch {
	case errors.Is(statErr, os.ErrNotExist):
		return fmt.Errorf("%s does not exist: %w", path, ErrNotSupported)
	case errors.Is(statErr, os.ErrPermission):
		if has, known := kernelHasUserEvents(); known && !has {
			return fmt.Errorf("%s cannot exist: the running kernel has no user_events (its configuration or symbols say so), so no permission on tracefs helps: %w", path, ErrNotSupported)
		}
	}
	return nil
}

// EventID returns the trace event id of the user_event called name, read from
// <tracefs>/events/user_events/NAME/id: the event_type perf and BPF programs
// on perf_tp_event see. The event must be registered (by any process).
func EventID(name string) (uint32, error) {
	if err := checkName(name); err != nil {
		return 0, err
	}
	dir, err := TracefsDir()
	if err != nil {
		return 0, err
	}
	path := filepath.Join(dir, "events", "user_events", name, "id")
	b, err := os.ReadFile(path)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return 0, fmt.Errorf("user_event %s: not registered (no %s): %w", name, path, err)
		}
		return 0, fmt.Errorf("user_event %s: %w", name, err)
	}
	var id uint32
	if _, err := fmt.Sscan(strings.TrimSpace(string(b)), &id); err != nil {
		return 0, fmt.Errorf("user_event %s: parse %s: %w", name, path, err)
	}
	return id, nil
}
