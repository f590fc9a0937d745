//go:build linux

package collector

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// mapMemlockAll sums the memlock of every BPF map this process holds open
// (/proc/self/fdinfo).
func mapMemlockAll(t *testing.T) uint64 {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fdinfo")
	if err != nil {
		t.Fatal(err)
	}
	var total uint64
	for _, e := range ents {
		b, err := os.ReadFile(filepath.Join("/proc/self/fdinfo", e.Name()))
		if err != nil || !strings.Contains(string(b), "map_id:") {
			continue
		}
		for _, line := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(line, "memlock:"); ok {
				n, _ := strconv.ParseUint(strings.TrimSpace(v), 10, 64)
				total += n
			}
		}
	}
	return total
}

// TestEstimateMapBytes loads collectors of several sizes and holds
// EstimateMapBytes, which the memory budget plans with before anything is
// loaded, within 5% of the memory the kernel reports for their maps.
func TestEstimateMapBytes(t *testing.T) {
	for _, cfg := range []Config{
		{MaxSeries: 1024, HistogramCells: 1 << 14},
		{MaxSeries: 20000, HistogramCells: 1 << 20, RingbufBytes: 1 << 20},
		{},
	} {
		t.Run(fmt.Sprintf("series=%d", cfg.MaxSeries), func(t *testing.T) {
			requireBPF(t)
			est, err := EstimateMapBytes(cfg)
			if err != nil {
				t.Fatal(err)
			}
			before := mapMemlockAll(t)
			c := newMarkerCollector(t, cfg)
			got := mapMemlockAll(t) - before
			t.Logf("estimate %d bytes, kernel %d (core maps %d)", est, got, c.MapBytes())
			if diff := float64(est) - float64(got); diff > 0.05*float64(got) || diff < -0.05*float64(got) {
				t.Errorf("estimate %d bytes, the kernel charges %d: %.1f%% off", est, got, 100*diff/float64(got))
			}
		})
	}
}
