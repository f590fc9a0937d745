//go:build linux

package userevents

import (
	"errors"
	"os"
	"runtime"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// inPrivateMountNamespace runs fn on a thread of its own in a new mount
// namespace where tracefs (and debugfs, which automounts it) is unmounted,
// as on machines that do not mount it at boot. The thread is never given
// back to the runtime: it exits with its goroutine.
func inPrivateMountNamespace(t *testing.T, fn func() error) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root to make a mount namespace")
	}
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // not unlocked: the thread's namespace must not be reused
		if err := unix.Unshare(unix.CLONE_NEWNS | unix.CLONE_FS); err != nil {
			errc <- err
			return
		}
		if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
			errc <- err
			return
		}
		for _, dir := range []string{"/sys/kernel/debug/tracing", "/sys/kernel/debug", "/sys/kernel/tracing"} {
			for unix.Unmount(dir, unix.MNT_DETACH) == nil {
			}
		}
		for _, dir := range tracefsPaths {
			if isTracefs(dir) {
				errc <- errors.New(dir + " still has tracefs after unmounting")
				return
			}
		}
		errc <- fn()
	}()
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
}

func TestTracefsMountsWhenMissing(t *testing.T) {
	inPrivateMountNamespace(t, func() error {
		dir, err := locateTracefs()
		if err != nil {
			return err
		}
		if dir != "/sys/kernel/tracing" || !isTracefs(dir) {
			return errors.New("locateTracefs returned " + dir + " without tracefs mounted there")
		}
		return nil
	})
}

func TestTracefsSaysWhatToRun(t *testing.T) {
	inPrivateMountNamespace(t, func() error {
		// Drop CAP_SYS_ADMIN from this thread only, as for a user that
		// may not mount.
		hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
		var data [2]unix.CapUserData
		if err := unix.Capget(&hdr, &data[0]); err != nil {
			return err
		}
		data[0].Effective &^= 1 << unix.CAP_SYS_ADMIN
		if err := unix.Capset(&hdr, &data[0]); err != nil {
			return err
		}
		_, err := locateTracefs()
		if err == nil || !errors.Is(err, unix.EPERM) || !strings.Contains(err.Error(), "run: sudo mount -t tracefs nodev /sys/kernel/tracing") {
			return errors.New("without CAP_SYS_ADMIN: got " + errString(err) + ", want EPERM with the command to run")
		}
		return nil
	})
}

func errString(err error) string {
	if err == nil {
		return "no error"
	}
	return err.Error()
}
