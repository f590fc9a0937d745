package tpsource

import (
	"testing"

	"github.com/spanwatch/spanwatch/bpf"
)

// TestMaxOperandsMatchBPF checks MaxOperands against the BPF objects that
// fetch the operands (this package stays free of the bpf package, so it
// keeps the values and this test compares them).
func TestMaxOperandsMatchBPF(t *testing.T) {
	var m bpf.EventheaderEhMapping
	for _, c := range []struct {
		kind Kind
		want int
	}{
		{EventHeader, int(bpf.EventheaderEhMappingSizesEH_MAX_OPS)},
		{EventHeader, len(m.IdxOps)},
		{UserEvents, int(bpf.SourcetestSrcSizesSRC_OPERANDS)},
	} {
		if got := MaxOperands[c.kind]; got != c.want {
			t.Errorf("MaxOperands[%s] = %d, the BPF object fetches %d", c.kind, got, c.want)
		}
	}
	// A Span mapping's name, duration and key come first among the wanted
	// fields; the operands must fit beside them.
	if n := MaxOperands[EventHeader] + 3; n > int(bpf.EventheaderEhLimitsEH_MAX_WANT) {
		t.Errorf("%d operands and 3 span fields exceed EH_MAX_WANT (%d)", MaxOperands[EventHeader], bpf.EventheaderEhLimitsEH_MAX_WANT)
	}
}
