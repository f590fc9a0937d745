package bpf

import (
	"fmt"
	"unsafe"

	"github.com/cilium/ebpf"
)

// CoreMaps are the maps bpf/aggregate.h defines: every object that includes
// it must share the collector's (ShareCore), so that all sources feed the
// same aggregates. TestCoreMapsListed checks the list against the header.
var CoreMaps = []string{
	"core", "series", "series_index", "free_slots", "series_dirty", "cell_banks", "cell_dirty", "cell_counts",
	"cg_created", "cg_released", "cg_quota", "cg_workload", "cg_split", "split_comms", "budgets", "budget_globs", "names", "overruns", "counters",
}

// ShareCore makes spec use the core's maps: each core map spec is given
// the live map's size and flags (the collector sizes them at load time)
// and the returned replacements go to ebpf.CollectionOptions.MapReplacements.
// A core map missing from maps is an error: a source loaded without it
// would aggregate into a private copy nobody reads.
func ShareCore(spec *ebpf.CollectionSpec, maps map[string]*ebpf.Map) (map[string]*ebpf.Map, error) {
	repl := map[string]*ebpf.Map{}
	for _, name := range CoreMaps {
		ms, ok := spec.Maps[name]
		if !ok {
			continue
		}
		m := maps[name]
		if m == nil {
			return nil, fmt.Errorf("core map %s not given", name)
		}
		ms.MaxEntries = m.MaxEntries()
		ms.Flags = m.Flags()
		repl[name] = m
	}
	return repl, nil
}

// Bytes are the bytes of a char array of a generated struct (bpf2go makes
// them []int8), without a copy.
func Bytes(b []int8) []byte {
	if len(b) == 0 {
		return nil
	}
	return unsafe.Slice((*byte)(unsafe.Pointer(&b[0])), len(b))
}
