//go:build linux

package collector

import (
	"context"
	"os"
	"testing"

	"github.com/spanwatch/spanwatch/bpf"
)

// TestMapsAreTheCoreMaps checks that the maps lent to sources are every
// map bpf/aggregate.h defines (bpf.CoreMaps), each loaded.
func TestMapsAreTheCoreMaps(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to load BPF")
	}
	c, err := New(context.Background(), Config{Sources: Sources{Marker: true}, ScanInterval: -1, MaxSeries: 64})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	got := c.Maps()
	if len(got) != len(bpf.CoreMaps) {
		t.Fatalf("Maps has %d maps, bpf.CoreMaps lists %d", len(got), len(bpf.CoreMaps))
	}
	for _, name := range bpf.CoreMaps {
		if got[name] == nil {
			t.Errorf("Maps has no map %s", name)
		}
	}
	sc := c.SourceCore()
	if len(sc.Maps) != len(got) || (sc.TracepointMethod != "fentry" && sc.TracepointMethod != "kprobe") {
		t.Errorf("SourceCore lends %d maps, tracepoint method %q", len(sc.Maps), sc.TracepointMethod)
	}
}
