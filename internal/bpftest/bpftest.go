//go:build linux

// Package bpftest holds what tests that load BPF share: how to tell a
// kernel that lacks a feature (a skip) from a program that should have
// loaded and did not (a failure).
//
// A test binary that imports it raises RLIMIT_MEMLOCK at start, as the
// agent does: before 5.11 the kernel charges BPF memory to it, and every
// load would fail with EPERM, which reads as a refused program type.
package bpftest

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/rlimit"
	"golang.org/x/sys/unix"

	"github.com/spanwatch/spanwatch/internal/kernel"
)

// memlockErr is why RLIMIT_MEMLOCK could not be raised (not root), or nil.
var memlockErr = rlimit.RemoveMemlock()

// InVM reports whether the test runs in spanwatch's test VM
// (SPANWATCH_IN_VM=1, test/vm/run.sh), where root and BTF are given.
func InVM() bool { return os.Getenv("SPANWATCH_IN_VM") == "1" }

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
	case errors.Is(err, kernel.ErrRefused):
		tb.Fatalf("%s: %v\n%s", what, err, strings.Join(kernel.VerifierLog(err), "\n"))
	case errors.Is(err, ebpf.ErrNotSupported):
		tb.Skipf("%s: this kernel lacks it: %v", what, err)
	case os.Geteuid() != 0 && (errors.Is(err, unix.EPERM) || errors.Is(err, unix.EACCES)):
		tb.Skipf("%s: needs root (CAP_BPF, CAP_PERFMON): %v", what, err)
	case os.Geteuid() == 0 && errors.Is(err, unix.EPERM) && memlockErr != nil:
		tb.Fatalf("%s: %v (RLIMIT_MEMLOCK could not be raised: %v)", what, err, memlockErr)
	case os.Geteuid() == 0 && errors.Is(err, unix.EPERM):
		tb.Skipf("%s: this kernel refuses it to root (EPERM): %v", what, err)
	}
	tb.Fatalf("%s: %v", what, err)
}

// Require skips the test unless the kernel has every feature in fs, and
// fails it instead where the kernel's release should have one (it is at
// least the mainline release that brought it, kernel.Probes.Expected) and
// the probe says it has not: there a refused feature is a regression, not
// a missing one, as cilium/ebpf's tests check kernel versions. Without
// root the probes cannot tell, and the test skips.
func Require(tb testing.TB, fs ...kernel.Feature) {
	tb.Helper()
	p := kernel.Probe()
	for _, f := range fs {
		r := p.Results[f]
		switch {
		case r.Have:
			continue
		case r.Unknown && os.Geteuid() != 0:
			tb.Skipf("needs root to probe for %s: %v", f.What(), r.Err)
		case r.Unknown:
			tb.Fatalf("kernel %s: the probe for %s failed: %v", p.Release, f.What(), r.Err)
		case p.Expected(f):
			since, _ := f.Since()
			tb.Fatalf("kernel %s should have %s (mainline %s+), but the probe says: %v", p.Release, f.What(), since, r.Err)
		}
		tb.Skipf("kernel %s lacks %s: %v", p.Release, f.What(), r.Err)
	}
}

// RequireRoot skips the test unless it runs as root, and fails it in the
// test VM, where it always should.
func RequireRoot(tb testing.TB) {
	tb.Helper()
	if os.Geteuid() == 0 {
		return
	}
	if InVM() {
		tb.Fatal("SPANWATCH_IN_VM=1 but not root")
	}
	tb.Skip("needs root (CAP_BPF, CAP_PERFMON) to load BPF")
}

// Describe names the kernel a test ran on, for its log.
func Describe() string {
	p := kernel.Probe()
	return fmt.Sprintf("kernel %s", p.Release)
}
