//go:build linux

package collector

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/spanwatch/spanwatch/internal/elfbuild"
	"github.com/spanwatch/spanwatch/internal/userfile"
)

// findMarkerIn runs findMarker on the file at path and returns what it
// found and the heap it allocated.
func findMarkerIn(t *testing.T, path string) (marker, error, uint64) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var a, b runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&a)
	m, err := findMarker(f)
	runtime.ReadMemStats(&b)
	return m, err, b.TotalAlloc - a.TotalAlloc
}

// TestFindMarkerSizeBombs: the /proc scan parses every executable any user
// runs. A 20 KB C program whose symbol table claims 128 MiB (a hole) took
// the agent from 239 MB to 1.14 GB in 2 s; a span SDK binary with a
// 256 MiB one, 2.78 GB. Now the table is read a chunk at a time up to a
// cap, and the SDK binary's marker is still found (through its pclntab).
func TestFindMarkerSizeBombs(t *testing.T) {
	dir := t.TempDir()
	app := filepath.Join(dir, "app")
	// An application that links the span SDK, built as applications are
	// (go test's binaries have no symbol table).
	gobin, err := exec.LookPath("go")
	if err != nil {
		t.Skipf("skipping: %v", err)
	}
	if out, err := exec.Command(gobin, "build", "-o", app, "github.com/spanwatch/spanwatch/examples/go-http").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	want, err, plain := findMarkerIn(t, app)
	if err != nil {
		t.Skipf("skipping: this test binary has no marker to find: %v", err)
	}
	if err := elfbuild.Patch(app, ".symtab", nil, 256<<20, 0); err != nil {
		t.Fatal(err)
	}
	before := userfile.Counts()[userfile.ReasonSymbols]
	got, err, n := findMarkerIn(t, app)
	if err != nil || got.off != want.off || got.sem != want.sem {
		t.Errorf("with a 256 MiB symbol table: %+v, %v; want %+v", got, err, want)
	}
	t.Logf("findMarker allocated %d MiB (%d MiB with the real symbol table)", n>>20, plain>>20)
	if n > plain+16<<20 {
		t.Errorf("findMarker allocated %d MiB with a 256 MiB symbol table, %d MiB without", n>>20, plain>>20)
	}
	if userfile.Counts()[userfile.ReasonSymbols] <= before {
		t.Error("the symbol table's cap was not counted")
	}

	cc, err := exec.LookPath("cc")
	if err != nil {
		t.Skipf("skipping the C program: %v", err)
	}
	src := filepath.Join(dir, "tiny.c")
	os.WriteFile(src, []byte("int main(void) { return 0; }\n"), 0o644)
	tiny := filepath.Join(dir, "tiny")
	if out, err := exec.Command(cc, "-O2", "-o", tiny, src).CombinedOutput(); err != nil {
		t.Fatalf("cc: %v\n%s", err, out)
	}
	if err := elfbuild.Patch(tiny, ".symtab", nil, 128<<20, 0); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(tiny).CombinedOutput(); err != nil {
		t.Fatalf("the patched program does not run: %v\n%s", err, out)
	}
	_, err, n = findMarkerIn(t, tiny)
	if !errors.Is(err, errNoMarker) {
		t.Errorf("tiny C program: %v, want errNoMarker", err)
	}
	if n > 4<<20 {
		t.Errorf("findMarker allocated %d MiB for a C program with a 128 MiB symbol table", n>>20)
	}
}

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
	if d := time.Since(start); d > markerTimeout+2*time.Second {
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
