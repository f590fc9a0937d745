//go:build linux

package collector

import (
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/spanwatch/spanwatch/source/marker"
)

// TestMarkerScanHostileExe: executables the /proc scan meets that never
// open or never answer: a FIFO, and a file in a FUSE mount whose daemon
// never answers. The scan gives up on them in time and attaches the SDK
// binary after them; the next scan is not held up by the stuck one (its
// user is busy), and the collector closes at once.
func TestMarkerScanHostileExe(t *testing.T) {
	c, bin, proc := markerFixture(t)
	dir := filepath.Dir(bin)
	fifo := filepath.Join(dir, "fifo")
	if err := unix.Mkfifo(fifo, 0o755); err != nil {
		t.Fatal(err)
	}
	startProc(t, proc, "10", fifo)
	fuse, err := os.OpenFile("/dev/fuse", os.O_RDWR, 0)
	if err == nil {
		mnt := filepath.Join(dir, "fuse")
		os.Mkdir(mnt, 0o755)
		opts := "fd=" + strconv.Itoa(int(fuse.Fd())) + ",rootmode=40000,user_id=0,group_id=0"
		if err := unix.Mount("spanwatch-test", mnt, "fuse.spanwatch-test", unix.MS_NOSUID|unix.MS_NODEV, opts); err == nil {
			t.Cleanup(func() { fuse.Close(); unix.Unmount(mnt, unix.MNT_DETACH) })
			startProc(t, proc, "11", filepath.Join(mnt, "app"))
		} else {
			fuse.Close()
			t.Logf("no FUSE mount (%v): the FIFO only", err)
		}
	}
	startProc(t, proc, "12", bin)
	start := time.Now()
	c.ScanMarkers()
	if d := time.Since(start); d > marker.Timeout+2*time.Second {
		t.Errorf("the scan took %v", d)
	}
	if got := c.MarkerBinaries(); len(got) != 1 || got[0] != bin {
		t.Errorf("attached %v, want [%s]", got, bin)
	}
	start = time.Now()
	c.ScanMarkers()
	if d := time.Since(start); d > time.Second {
		t.Errorf("the next scan took %v while a lookup hangs", d)
	}
	start = time.Now()
	c.Close()
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("Close took %v", d)
	}
}
