//go:build linux

package overrun

import (
	"log/slog"
	"strings"
	"testing"
	"unsafe"

	"github.com/spanwatch/spanwatch/bpf"
	"github.com/spanwatch/spanwatch/snapshot"
)

// kernelSymbolizer names every address, kernel ones too.
type kernelSymbolizer struct{ countingSymbolizer }

func (s *kernelSymbolizer) Kernel(addrs []uint64) ([]snapshot.Frame, error) {
	out := make([]snapshot.Frame, len(addrs))
	for i, a := range addrs {
		out[i] = snapshot.Frame{Addr: a, Function: "k"}
	}
	return out, nil
}

// TestShedStackDetail: while the memory budget sheds stack detail, an
// overrun keeps its innermost StackFramesShed user frames, loses its
// kernel stack, says why, and a snapshot keeps a tenth of its overruns
// (the rest counted as dropped); given back, records are whole again.
func TestShedStackDetail(t *testing.T) {
	raw := rawOverrun(7, "shed.span")
	r := (*bpf.SpanwatchOverrun)(unsafe.Pointer(&raw[0]))
	for i := range r.Ustack {
		r.Ustack[i] = uint64(0x401000 + i)
	}
	r.UstackLen = int32(8 * len(r.Ustack))
	r.Kstack[0], r.Kstack[1], r.KstackLen = 0xffffffff81000000, 0xffffffff81000010, 16
	cfg := Config{Logger: slog.New(slog.DiscardHandler), Keep: 100, Symbolizer: &kernelSymbolizer{}}
	o := NewQueue(&loopRing{}, cfg)

	o.handle(raw)
	ovs, dropped, _ := o.Take()
	if len(ovs) != 1 || len(ovs[0].UserStack) != len(r.Ustack) || len(ovs[0].KernelStack) != 2 || dropped != 0 {
		t.Fatalf("whole: %d overruns, %d user frames, %d kernel frames", len(ovs), len(ovs[0].UserStack), len(ovs[0].KernelStack))
	}

	o.SetStackDetail(false)
	for range 30 {
		o.handle(raw)
	}
	ovs, dropped, _ = o.Take()
	if len(ovs) != 10 || dropped != 20 {
		t.Fatalf("shed: %d overruns kept, %d dropped; want 10 and 20", len(ovs), dropped)
	}
	ov := ovs[0]
	if len(ov.UserStack) != StackFramesShed || ov.UserStack[0].Addr != 0x401000 || ov.KernelStack != nil || !strings.Contains(ov.StackError, "shed under memory pressure") {
		t.Errorf("shed: %d user frames from %#x, %d kernel frames, stack_error %q", len(ov.UserStack), ov.UserStack[0].Addr, len(ov.KernelStack), ov.StackError)
	}

	o.SetStackDetail(true)
	o.handle(raw)
	ovs, _, _ = o.Take()
	if len(ovs[0].UserStack) != len(r.Ustack) || len(ovs[0].KernelStack) != 2 || strings.Contains(ovs[0].StackError, "shed") {
		t.Errorf("given back: %d user frames, %d kernel frames, %q", len(ovs[0].UserStack), len(ovs[0].KernelStack), ovs[0].StackError)
	}
}
