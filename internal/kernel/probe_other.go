//go:build !linux

package kernel

import (
	"fmt"

	"github.com/cilium/ebpf"
)

// Probe reports every feature missing: spanwatch's BPF needs Linux.
func Probe() *Probes {
	p := &Probes{Release: "not Linux", Results: map[Feature]Result{}}
	for _, f := range Features {
		p.Results[f] = Result{Err: fmt.Errorf("%w: not Linux", ebpf.ErrNotSupported)}
	}
	return p
}

// PreemptRT reports false: spanwatch's BPF needs Linux.
func PreemptRT() bool { return false }
