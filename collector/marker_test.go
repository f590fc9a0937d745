//go:build linux

package collector

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/cilium/ebpf/link"

	"github.com/spanwatch/spanwatch/internal/kernel"
	"github.com/spanwatch/spanwatch/source/marker"

	"github.com/spanwatch/spanwatch/emit"
)

// markerLinks counts the kernel's links of the collector's marker program.
func markerLinks(t *testing.T, c *Collector) int {
	t.Helper()
	if !kernel.Probe().Has(kernel.AttachCookie) {
		// Before 5.15 (perf event links came with cookies) a perf
		// uprobe is attached with an ioctl, not a BPF link the kernel
		// lists: count the marker's own.
		return c.marker.Links()
	}
	info, err := c.objs.UprobeMarker.Info()
	if err != nil {
		t.Fatal(err)
	}
	id, ok := info.ID()
	if !ok {
		t.Skip("kernel does not report program ids (4.13+)")
	}
	n := 0
	it := new(link.Iterator)
	defer it.Close()
	for it.Next() {
		li, err := it.Link.Info()
		if err == nil && li.Program == id {
			n++
		}
	}
	if err := it.Err(); err != nil {
		t.Fatalf("iterate links: %v", err)
	}
	return n
}

// openFilesOf counts this process's open files at path (the symbolizer's
// copy of a traced binary), deleted or not.
func openFilesOf(t *testing.T, path string) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, e := range ents {
		target, err := os.Readlink(filepath.Join("/proc/self/fd", e.Name()))
		if err == nil && strings.TrimSuffix(target, " (deleted)") == path {
			n++
		}
	}
	return n
}

// markerFixture copies this test binary, which links the span SDK, and
// starts a marker collector scanning a /proc of its own, where the test
// makes processes appear and exit as directories with an exe link.
func markerFixture(t *testing.T) (c *Collector, bin, proc string) {
	t.Helper()
	requireBPF(t)
	if emit.Mode() != "marker" {
		t.Skipf("the span SDK uses %s here, not the marker", emit.Mode())
	}
	dir := t.TempDir()
	bin = filepath.Join(dir, "app")
	copyFile(t, bin)
	proc = filepath.Join(dir, "proc")
	if err := os.Mkdir(proc, 0o755); err != nil {
		t.Fatal(err)
	}
	c, err := New(context.Background(), Config{Sources: Sources{Marker: true}, ScanInterval: -1, ProcRoot: proc, Inflight: InflightConfig{Off: true}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c, bin, proc
}

func copyFile(t *testing.T, dst string) {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	in, err := os.Open(exe)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o755)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(out, in); err != nil {
		t.Fatal(err)
	}
	if err := out.Close(); err != nil {
		t.Fatal(err)
	}
}

// startProc makes a process running bin appear in proc.
func startProc(t *testing.T, proc, pid, bin string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Join(proc, pid), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(bin, filepath.Join(proc, pid, "exe")); err != nil {
		t.Fatal(err)
	}
}

// TestMarkerReleasesGoneBinaries: a binary's uprobe, its entry and the
// symbolizer's open copy are let go once no process runs it; one that
// still runs, or that Config.MarkerBinaries names, is kept.
func TestMarkerReleasesGoneBinaries(t *testing.T) {
	c, bin, proc := markerFixture(t)
	startProc(t, proc, "100", bin)
	startProc(t, proc, "101", bin)
	c.ScanMarkers()
	if got := c.MarkerBinaries(); len(got) != 1 || got[0] != bin {
		t.Fatalf("attached %v, want [%s]", got, bin)
	}
	if n := markerLinks(t, c); n != 1 {
		t.Fatalf("%d marker links, want 1", n)
	}
	if n := openFilesOf(t, bin); n != 1 {
		t.Fatalf("%d open files of %s, want 1 (the symbolizer's anchor)", n, bin)
	}
	// One of its two processes exits: the binary stays.
	if err := os.RemoveAll(filepath.Join(proc, "100")); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < marker.ReleaseScans+1; i++ {
		c.ScanMarkers()
	}
	if n := markerLinks(t, c); n != 1 {
		t.Fatalf("%d marker links while a process runs the binary, want 1", n)
	}
	// The other exits and the file is removed.
	if err := os.RemoveAll(filepath.Join(proc, "101")); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(bin); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < marker.ReleaseScans-1; i++ {
		c.ScanMarkers()
		if n := markerLinks(t, c); n != 1 {
			t.Fatalf("scan %d after the exit: %d marker links, want 1 until %d scans missed it", i+1, n, marker.ReleaseScans)
		}
	}
	c.ScanMarkers()
	if n := markerLinks(t, c); n != 0 {
		t.Errorf("%d marker links after the binary's processes exited, want 0", n)
	}
	if got := c.MarkerBinaries(); len(got) != 0 {
		t.Errorf("still attached to %v", got)
	}
	if n := c.marker.Entries(); n != 0 {
		t.Errorf("%d binaries remembered, want 0", n)
	}
	if n := openFilesOf(t, bin); n != 0 {
		t.Errorf("%d open files of the removed %s, want 0", n, bin)
	}
}

// TestMarkerForgetsBinariesWithoutMarker: binaries checked and found
// without the marker are forgotten too when their processes exit.
func TestMarkerForgetsBinariesWithoutMarker(t *testing.T) {
	c, _, proc := markerFixture(t)
	startProc(t, proc, "200", "/bin/sh")
	c.ScanMarkers()
	if n := c.marker.Entries(); n != 1 {
		t.Fatalf("%d binaries remembered, want 1 (/bin/sh, no marker)", n)
	}
	if err := os.RemoveAll(filepath.Join(proc, "200")); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < marker.ReleaseScans; i++ {
		c.ScanMarkers()
	}
	if n := c.marker.Entries(); n != 0 {
		t.Errorf("%d binaries remembered after their process exited, want 0", n)
	}
}

// TestMarkerAttachOnce: concurrent attaches of one binary (a scan racing
// ScanMarkers, two paths to one file) leave one link.
func TestMarkerAttachOnce(t *testing.T) {
	c, bin, proc := markerFixture(t)
	alias := filepath.Join(filepath.Dir(bin), "alias")
	if err := os.Link(bin, alias); err != nil {
		t.Fatal(err)
	}
	for round := 0; round < 3; round++ {
		start := make(chan struct{})
		var wg sync.WaitGroup
		errs := make([]error, 4)
		for i := range errs {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				p := bin
				if i%2 == 1 {
					p = alias
				}
				errs[i] = c.marker.AttachPath(p)
			}()
		}
		close(start)
		wg.Wait()
		for _, err := range errs {
			if err != nil {
				t.Fatal(err)
			}
		}
		if n := markerLinks(t, c); n != 1 {
			t.Fatalf("round %d: %d marker links after 4 concurrent attaches of one file, want 1", round, n)
		}
		// No process runs it (proc is empty): scans let it go.
		for i := 0; i < marker.ReleaseScans; i++ {
			c.ScanMarkers()
		}
		if n := markerLinks(t, c); n != 0 {
			t.Fatalf("round %d: %d marker links after release, want 0", round, n)
		}
	}
	_ = proc
}
