//go:build linux

package tracepoint

import (
	"fmt"

	"github.com/cilium/ebpf"

	"github.com/spanwatch/spanwatch/bpf"
	"github.com/spanwatch/spanwatch/source"
)

// Program names in bpf/userevents.bpf.c.
const (
	progUEFentry = "ue_fentry_perf_tp_event"
	progUEKprobe = "ue_kprobe_perf_tp_event"
	progUETest   = "ue_test"
)

// ueObjects is the loaded user_events fields object.
type ueObjects struct {
	coll      *ebpf.Collection
	prog      *ebpf.Program
	events    *ebpf.Map // tracepoint id -> bpf.UsereventsUeEvent
	sources   *ebpf.Map // index -> bpf.UsereventsUeSource
	counters  *ebpf.Map
	inflight  *ebpf.Map
	testInput *ebpf.Map
}

// loadUserEvents loads bpf/userevents.bpf.c beside the core with the
// program for method: "fentry", "kprobe", or "test"; labelValues is the
// sum of its sources' label caps (the admitted label values' map is
// sized to it).
func loadUserEvents(core map[string]*ebpf.Map, method string, labelValues int) (*ueObjects, error) {
	spec, err := bpf.LoadUserevents()
	if err != nil {
		return nil, fmt.Errorf("load user_events bpf spec: %w", err)
	}
	source.SizeLabelValues(spec, labelValues)
	prog := map[string]string{"fentry": progUEFentry, "kprobe": progUEKprobe, "test": progUETest}[method]
	if prog == "" {
		return nil, fmt.Errorf("user_events: unknown attach method %q", method)
	}
	if method != "test" {
		delete(spec.Maps, "ue_test_input")
	}
	coll, err := source.LoadBeside("user_events", spec, core, prog)
	if err != nil {
		return nil, err
	}
	return &ueObjects{
		coll:      coll,
		prog:      coll.Programs[prog],
		events:    coll.Maps["ue_events"],
		sources:   coll.Maps["ue_sources"],
		counters:  coll.Maps["ue_counters"],
		inflight:  coll.Maps["ue_inflight"],
		testInput: coll.Maps["ue_test_input"],
	}, nil
}

func (o *ueObjects) program() *ebpf.Program {
	if o == nil {
		return nil
	}
	return o.prog
}

func (o *ueObjects) close() {
	if o != nil && o.coll != nil {
		o.coll.Close()
	}
}

// srcCounters is the object's bpf/source.h counters, nil without it.
func (o *ueObjects) srcCounters() *ebpf.Map {
	if o == nil {
		return nil
	}
	return o.coll.Maps["src_counters"]
}
