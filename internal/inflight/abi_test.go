//go:build linux

package inflight

import (
	"testing"

	"github.com/spanwatch/spanwatch/bpf"
)

// TestSlotsCoverUSDTSources checks that inflight_slots (inflight.bpf.c's
// INFLIGHT_SOURCES) has a slot for every index of usdt_sources
// (usdt.bpf.c's USDT_MAX_SOURCES): two objects' sizes that must agree.
func TestSlotsCoverUSDTSources(t *testing.T) {
	u, err := bpf.LoadUsdt()
	if err != nil {
		t.Fatal(err)
	}
	i, err := bpf.LoadInflight()
	if err != nil {
		t.Fatal(err)
	}
	srcs, slots := u.Maps["usdt_sources"].MaxEntries, i.Maps["inflight_slots"].MaxEntries
	if slots < srcs {
		t.Fatalf("inflight_slots has %d entries, usdt_sources %d", slots, srcs)
	}
	if got := i.Maps["inflight_parked"].MaxEntries; got != uint32(maxParked) {
		t.Fatalf("inflight_parked has %d entries, the watcher writes up to %d", got, maxParked)
	}
}
