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
// loaded with the same privileges and memory limit. So that case, the
// expected path on such a kernel, is logged at info without the library's
// error text; a kernel without the program type or trampolines likewise. Any
// other error (a verifier rejection of the fentry program, say) is a warning
// with the error: fentry should have loaded and did not.
func logFentryFallback(log *slog.Logger, fentryErr error) {
	var verr *ebpf.VerifierError
	switch {
	case errors.As(fentryErr, &verr):
		log.Warn("fentry_load_failed", "error", fentryErr, "fallback", "kprobe")
	case errors.Is(fentryErr, unix.EPERM):
		log.Info("fentry_refused", "reason", "this kernel refuses fentry programs (EPERM while the kprobe loads)", "fallback", "kprobe")
	case errors.Is(fentryErr, ebpf.ErrNotSupported), errors.Is(fentryErr, unix.EOPNOTSUPP):
		log.Info("fentry_unsupported", "reason", "this kernel has no fentry trampolines", "fallback", "kprobe")
	default:
		log.Warn("fentry_load_failed", "error", fentryErr, "fallback", "kprobe")
	}
}
