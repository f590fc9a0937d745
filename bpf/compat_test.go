package bpf

import (
	"fmt"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
)

// TestCompatObjectsUseOnlyXadd checks that the compat objects use no
// instruction 5.10 lacks: of the BPF atomics only an add whose result is
// not used (BPF_XADD; fetch, exchange, compare-and-exchange, and, or and
// xor came in 5.12), and no bpf_loop (5.17) or kfunc call. The kernel
// would refuse them at load; this finds it without a 5.10 kernel.
func TestCompatObjectsUseOnlyXadd(t *testing.T) {
	for name, load := range map[string]func() (*ebpf.CollectionSpec, error){
		"spanwatch": LoadSpanwatchCompat, "usdt": LoadUsdtCompat, "coretest": LoadCoretestCompat,
	} {
		spec, err := load()
		if err != nil {
			t.Fatal(err)
		}
		for _, bad := range newerThan510(spec) {
			t.Errorf("%s/%s", name, bad)
		}
	}
	// The check finds them where they are: in the full objects.
	spec, err := LoadSpanwatch()
	if err != nil {
		t.Fatal(err)
	}
	if len(newerThan510(spec)) == 0 {
		t.Fatal("the full spanwatch object has no instruction newer than 5.10: the check finds nothing")
	}
}

// newerThan510 lists the instructions of spec that 5.10 lacks.
func newerThan510(spec *ebpf.CollectionSpec) []string {
	var bad []string
	for pname, p := range spec.Programs {
		for i, ins := range p.Instructions {
			if ins.OpCode.Class() == asm.StXClass && ins.OpCode.Mode() == asm.AtomicMode {
				if op := ins.OpCode.AtomicOp(); op != asm.AddAtomic {
					bad = append(bad, fmt.Sprintf("%s: instruction %d is %v: 5.10 has BPF_XADD only", pname, i, ins))
				}
			}
			if ins.IsBuiltinCall() && asm.BuiltinFunc(ins.Constant) == asm.FnLoop {
				bad = append(bad, fmt.Sprintf("%s: instruction %d calls bpf_loop (5.17+)", pname, i))
			}
			if ins.IsKfuncCall() {
				bad = append(bad, fmt.Sprintf("%s: instruction %d calls a kfunc", pname, i))
			}
		}
	}
	return bad
}
