//go:build linux

package collector

import (
	"errors"
	"log/slog"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"
)

// logFentryFallback says why the core's tracepoint program runs on a kprobe
// rather than fentry, once the kprobe variant has loaded. fentryErr is the
// fentry variant's load error.
//
// A kernel that refuses tracing programs (lockdown, or a kernel built or
// configured to refuse fentry) answers EPERM even to root. cilium/ebpf then
// appends "(MEMLOCK may be too low, consider rlimit.RemoveMemlock)" to the
// error, which is not true here: the kprobe variant, with the same maps, just
// loaded with the same privileges and memory limit. That case, and a kernel
// without trampolines, are the expected paths on such kernels: a fallback,
// not an error, logged at debug as fentry_fallback without the library's
// error text (the start's kernel summary says what runs). Any other error (a
// verifier rejection of the fentry program, say) is a warning with the
// error: fentry should have loaded and did not.
func logFentryFallback(log *slog.Logger, fentryErr error) {
	var verr *ebpf.VerifierError
	switch {
	case errors.As(fentryErr, &verr):
		log.Warn("fentry_load_failed", "error", fentryErr, "fallback", "kprobe")
	case errors.Is(fentryErr, unix.EPERM):
		log.Debug("fentry_fallback", "fallback", "kprobe", "reason", "this kernel does not allow fentry programs (EPERM: lockdown or its configuration)")
	case errors.Is(fentryErr, ebpf.ErrNotSupported), errors.Is(fentryErr, unix.EOPNOTSUPP):
		log.Debug("fentry_fallback", "fallback", "kprobe", "reason", "this kernel has no fentry trampolines")
	default:
		log.Warn("fentry_load_failed", "error", fentryErr, "fallback", "kprobe")
	}
}
