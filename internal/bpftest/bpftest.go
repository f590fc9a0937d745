//go:build linux

// Package bpftest holds what tests that load BPF share: how to tell a
// kernel that lacks a feature (a skip) from a program that should have
// loaded and did not (a failure).
package bpftest

import (
	"errors"
	"os"
	"testing"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"
)

// SkipUnlessLoaded ends a test whose BPF object (what) did not load or
// attach: it skips when the kernel lacks the feature (ebpf.ErrNotSupported),
// when the test is not root (EPERM, EACCES), or when the kernel refuses the
// program type to root too (EPERM, as kernels that refuse fentry or
// iterators do), and fails on anything else. A verifier rejection or a map
// the kernel should create is a regression, not a reason to skip.
func SkipUnlessLoaded(tb testing.TB, what string, err error) {
	tb.Helper()
	var verr *ebpf.VerifierError
	switch {
	case errors.As(err, &verr):
		tb.Fatalf("%s: the verifier rejects it: %+v", what, verr)
	case errors.Is(err, ebpf.ErrNotSupported):
		tb.Skipf("%s: this kernel lacks it: %v", what, err)
	case os.Geteuid() != 0 && (errors.Is(err, unix.EPERM) || errors.Is(err, unix.EACCES)):
		tb.Skipf("%s: needs root (CAP_BPF, CAP_PERFMON): %v", what, err)
	case os.Geteuid() == 0 && errors.Is(err, unix.EPERM):
		tb.Skipf("%s: this kernel refuses it to root (EPERM): %v", what, err)
	}
	tb.Fatalf("%s: %v", what, err)
}
