package source

import (
	"errors"
	"fmt"

	"github.com/cilium/ebpf"

	"github.com/spanwatch/spanwatch/bpf"
)

// LoadBeside loads the programs named in keep from spec (deleting the
// others), with the core's maps (Core.Maps) in place of the spec's maps of the
// same name, so the object feeds the same aggregates. The core sizes some
// maps at load time: a replacement must match its spec exactly, so the
// spec takes the core map's size and flags.
func LoadBeside(what string, spec *ebpf.CollectionSpec, core map[string]*ebpf.Map, keep ...string) (*ebpf.Collection, error) {
	want := map[string]bool{}
	for _, k := range keep {
		if spec.Programs[k] == nil {
			return nil, fmt.Errorf("load %s bpf programs: no program %s in the object", what, k)
		}
		want[k] = true
	}
	for name := range spec.Programs {
		if !want[name] {
			delete(spec.Programs, name)
		}
	}
	repl, err := bpf.ShareCore(spec, core)
	if err != nil {
		return nil, fmt.Errorf("load %s bpf programs: %w", what, err)
	}
	coll, err := ebpf.NewCollectionWithOptions(spec, ebpf.CollectionOptions{MapReplacements: repl})
	if err != nil {
		var verr *ebpf.VerifierError
		if errors.As(err, &verr) {
			return nil, fmt.Errorf("load %s bpf programs: %+v", what, verr)
		}
		return nil, fmt.Errorf("load %s bpf programs (needs CAP_BPF and CAP_PERFMON, or root): %w", what, err)
	}
	return coll, nil
}

// SizeLabelValues sizes the admitted label values' map of an object that
// includes bpf/source.h to what its sources' caps can admit (at least 1,
// at most the header's SRC_LABEL_VALUES): a preallocated hash costs its
// full size whether or not it fills.
func SizeLabelValues(spec *ebpf.CollectionSpec, n int) {
	if ms := spec.Maps["src_label_values"]; ms != nil {
		ms.MaxEntries = uint32(max(1, min(n, int(ms.MaxEntries))))
	}
}
