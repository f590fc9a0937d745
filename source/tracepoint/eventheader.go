//go:build linux

package tracepoint

import (
	"fmt"

	"github.com/cilium/ebpf"

	"github.com/spanwatch/spanwatch/bpf"
	"github.com/spanwatch/spanwatch/source"
)

// Program names in bpf/eventheader.bpf.c.
const (
	progEHFentry = "eh_fentry_perf_tp_event"
	progEHKprobe = "eh_kprobe_perf_tp_event"
	progEHTest   = "eh_test"
	// progEHTestFixed is the fixed-struct path in the same harness, for
	// measuring the decoder against it.
	progEHTestFixed = "eh_test_fixed"
)

// ehObjects is the loaded EventHeader object.
type ehObjects struct {
	coll        *ebpf.Collection
	prog        *ebpf.Program // on perf_tp_event, or the test program
	tracepoints *ebpf.Map     // tracepoint id -> bpf.EventheaderEhTracepoint
	mappings    *ebpf.Map     // index -> bpf.EventheaderEhMapping
	counters    *ebpf.Map     // per-CPU, by eh_reason then EH_COUNT_*
	testInput   *ebpf.Map
	testFixed   *ebpf.Program // the fixed-struct path, with the test program
}

// loadEventHeader loads bpf/eventheader.bpf.c beside the core (core: its
// maps, Collector.Maps) with the program for method ("fentry" or
// "kprobe"), or with its test program when method is "test"; labelValues
// is the sum of its sources' label caps.
func loadEventHeader(core map[string]*ebpf.Map, method string, labelValues int) (*ehObjects, error) {
	spec, err := bpf.LoadEventheader()
	if err != nil {
		return nil, fmt.Errorf("load eventheader bpf spec: %w", err)
	}
	source.SizeLabelValues(spec, labelValues)
	prog := map[string]string{"fentry": progEHFentry, "kprobe": progEHKprobe, "test": progEHTest}[method]
	if prog == "" {
		return nil, fmt.Errorf("eventheader: unknown attach method %q", method)
	}
	keep := []string{prog}
	if method == "test" {
		keep = append(keep, progEHTestFixed)
	} else {
		delete(spec.Maps, "eh_test_input")
	}
	coll, err := source.LoadBeside("eventheader", spec, core, keep...)
	if err != nil {
		return nil, err
	}
	return &ehObjects{
		coll:        coll,
		prog:        coll.Programs[prog],
		tracepoints: coll.Maps["eh_tracepoints"],
		mappings:    coll.Maps["eh_mappings"],
		counters:    coll.Maps["eh_counters"],
		testInput:   coll.Maps["eh_test_input"],
		testFixed:   coll.Programs[progEHTestFixed],
	}, nil
}

func (o *ehObjects) close() {
	if o != nil && o.coll != nil {
		o.coll.Close()
	}
}

func (o *ehObjects) program() *ebpf.Program {
	if o == nil {
		return nil
	}
	return o.prog
}

// srcCounters is the object's bpf/source.h counters, nil without it.
func (o *ehObjects) srcCounters() *ebpf.Map {
	if o == nil {
		return nil
	}
	return o.coll.Maps["src_counters"]
}
