package usdt

import (
	"sync"

	"github.com/spanwatch/spanwatch/bpf"
)

// maxSources reads the size of the USDT object's usdt_sources map from the
// object itself (no kernel needed): the number of span sources a Tracer
// holds, which Tracer.Add enforces with the same map's size.
var maxSources = sync.OnceValue(func() int {
	spec, err := bpf.LoadUsdt()
	if err != nil {
		return 0
	}
	if m := spec.Maps["usdt_sources"]; m != nil {
		return int(m.MaxEntries)
	}
	return 0
})

// MaxSources is how many span sources one tracer holds (USDT_MAX_SOURCES
// in bpf/usdt.bpf.c); 0 where the object cannot be read.
func MaxSources() int { return maxSources() }
