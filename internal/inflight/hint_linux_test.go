package inflight

import (
	"fmt"
	"testing"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"
)

// The blocked sampler's "needs kernel 5.18+" hint is given only when the
// kernel lacks what the program uses, not when the verifier refuses it.
func TestKernelLacks(t *testing.T) {
	for _, tc := range []struct {
		name string
		err  error
		want bool
	}{
		{"not supported", fmt.Errorf("load: %w", ebpf.ErrNotSupported), true},
		{"unknown helper", &ebpf.VerifierError{Cause: unix.EINVAL, Log: []string{"0: (85) call bpf_copy_from_user_task#191", "unknown func bpf_copy_from_user_task#191"}}, true},
		{"refused loop", fmt.Errorf("field Prog: %w", &ebpf.VerifierError{Cause: unix.EINVAL, Log: []string{"421: (85) call bpf_copy_from_user_task#191", "infinite loop detected at insn 422"}}), false},
		{"unknown attach type", fmt.Errorf("load program: %w", unix.EINVAL), true},
		{"no memory", fmt.Errorf("load program: %w", unix.ENOMEM), false},
	} {
		if got := kernelLacks(tc.err); got != tc.want {
			t.Errorf("%s: kernelLacks = %t, want %t", tc.name, got, tc.want)
		}
	}
}
