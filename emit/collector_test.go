//go:build linux

package emit_test

import (
	"context"
	"os"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/spanwatch/spanwatch/collector"
	"github.com/spanwatch/spanwatch/emit"
)

// TestBadPayloadDoesNotCorrupt hands the collector payloads it cannot read
// (nil, and a pointer into a page that cannot be read) between good spans: they are counted as read
// errors and the good series stay exact.
func TestBadPayloadDoesNotCorrupt(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root (CAP_BPF, CAP_PERFMON) to load BPF")
	}
	if emit.Mode() != "marker" {
		t.Skipf("the SDK uses %s here; the marker is what this test feeds bad pointers", emit.Mode())
	}
	exe, _ := os.Executable()
	c, err := collector.New(context.Background(), collector.Config{Sources: collector.Sources{Marker: true}, ScanInterval: -1, MarkerBinaries: []string{exe}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	// A page nobody may read: the BPF program's bpf_probe_read_user fails.
	page, err := unix.Mmap(-1, 0, os.Getpagesize(), unix.PROT_NONE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Munmap(page)
	for i := 0; i < 100; i++ {
		emit.Record(&emit.Finished{Name: "good", Duration: time.Millisecond})
		emit.MarkerRaw(nil)
		emit.MarkerRaw(unsafe.Pointer(&page[0]))
	}
	s, err := c.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	if s.Stats.ReadErrors != 200 {
		t.Errorf("read errors %d, want 200", s.Stats.ReadErrors)
	}
	if len(s.Series) != 1 || s.Series[0].Span != "good" || s.Series[0].Count != 100 || s.Series[0].SumNs != 100*uint64(time.Millisecond) {
		t.Errorf("series %+v, want only good with 100 spans; stats %+v", s.Series, s.Stats)
	}
}

// BenchmarkEnabled measures recording a span while the collector listens,
// through the marker (a uprobe hit per span).
func BenchmarkEnabledMarker(b *testing.B) {
	if os.Geteuid() != 0 || emit.Mode() != "marker" {
		b.Skip("needs root and the marker mode")
	}
	exe, _ := os.Executable()
	c, err := collector.New(context.Background(), collector.Config{Sources: collector.Sources{Marker: true}, ScanInterval: -1, MarkerBinaries: []string{exe}})
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	f := &emit.Finished{Name: "bench", Duration: time.Millisecond}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		emit.Record(f)
	}
}
