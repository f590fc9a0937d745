package overrun

import (
	"strings"
	"testing"

	"github.com/cilium/ebpf/btf"

	"github.com/spanwatch/spanwatch/bpf"
)

// TestSourceNames checks sourceNames against the BPF objects' enum
// span_source, read from the core object's BTF: every source the kernel
// side can report has its name (the enumerator's, lower case, without
// SOURCE_), so a source added there and not here fails.
func TestSourceNames(t *testing.T) {
	spec, err := bpf.LoadSpanwatch()
	if err != nil {
		t.Fatal(err)
	}
	var e *btf.Enum
	if err := spec.Types.TypeByName("span_source", &e); err != nil {
		t.Fatalf("enum span_source in the core object's BTF: %v", err)
	}
	for _, v := range e.Values {
		want := strings.ToLower(strings.TrimPrefix(v.Name, "SOURCE_"))
		if got := sourceNames[uint32(v.Value)]; got != want {
			t.Errorf("%s (%d): named %q, want %q", v.Name, v.Value, got, want)
		}
	}
	if len(sourceNames) != len(e.Values) {
		t.Errorf("%d source names for %d enumerators", len(sourceNames), len(e.Values))
	}
}
