//go:build linux

package collector

import (
	"context"
	"os"
	"testing"
)

// newTestCollector starts a collector without the user_events source
// (this host's kernel may not have it), with a small series array.
func newTestCollector(t testing.TB, cfg Config) *Collector {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root to load BPF")
	}
	cfg.Sources = Sources{Marker: true}
	cfg.ScanInterval = -1
	if cfg.MaxSeries == 0 {
		cfg.MaxSeries = 1024
	}
	c, err := New(context.Background(), cfg)
	if err != nil {
		t.Fatalf("start collector: %v", err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}
