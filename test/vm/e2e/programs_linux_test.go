package e2e

import (
	"errors"
	"os"
	"strings"
	"testing"

	"github.com/cilium/ebpf"

	"github.com/spanwatch/spanwatch/bpf"
)

// TestBlockedSamplerLoads: the in-flight sampler of blocked threads and
// parked goroutines (a sleepable task iterator, kernel 5.18+) loads on the
// VM's 6.12 kernel. The collector only logs when it does not, so a
// verifier refusal (6.12 once refused its parked-goroutine loop as
// infinite while 6.18 took it) would otherwise pass every test unseen.
func TestBlockedSamplerLoads(t *testing.T) {
	if os.Getenv(inVM) != "1" {
		t.Skip("runs in the VM (test/vm), whose kernel differs from the host's; the host loads it in internal/inflight's tests")
	}
	spec, err := bpf.LoadInflight()
	if err != nil {
		t.Fatal(err)
	}
	var objs struct {
		Prog *ebpf.Program `ebpf:"inflight_blocked"`
	}
	err = spec.LoadAndAssign(&objs, &ebpf.CollectionOptions{Programs: ebpf.ProgramOptions{LogSizeStart: 1 << 24}})
	var ve *ebpf.VerifierError
	if errors.As(err, &ve) {
		tail := ve.Log[max(0, len(ve.Log)-20):]
		t.Fatalf("inflight_blocked refused by the verifier:\n%s", strings.Join(tail, "\n"))
	}
	if err != nil {
		t.Fatal(err)
	}
	objs.Prog.Close()
}
