//go:build linux

package collector

import (
	"bytes"
	"fmt"
	"log/slog"
	"strings"
	"testing"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"
)

// TestFentryFallbackMessage checks what each fentry load error is logged as
// once the kprobe variant has loaded.
func TestFentryFallbackMessage(t *testing.T) {
	// cilium/ebpf appends this hint to every EPERM from BPF_PROG_LOAD.
	const memlock = "MEMLOCK may be too low"
	for _, tc := range []struct {
		name  string
		err   error
		want  string // the line, level and message
		extra string // also in the line
	}{
		{"refused by the kernel", fmt.Errorf("field Tp: program fentry_perf_tp_event: load program: %w (%s, consider rlimit.RemoveMemlock)", unix.EPERM, memlock),
			"level=DEBUG msg=fentry_fallback", "this kernel does not allow fentry programs"},
		{"no trampolines", fmt.Errorf("load program: %w", ebpf.ErrNotSupported),
			"level=DEBUG msg=fentry_fallback", "no fentry trampolines"},
		{"verifier", fmt.Errorf("load program: %w", &ebpf.VerifierError{Cause: unix.EINVAL, Log: []string{"R1 invalid mem access"}}),
			"level=WARN msg=fentry_load_failed", "R1 invalid mem access"},
		{"other", fmt.Errorf("load program: %w", unix.E2BIG),
			"level=WARN msg=fentry_load_failed", "argument list too long"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var buf bytes.Buffer
			logFentryFallback(slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug})), tc.err)
			out := buf.String()
			if strings.Count(out, "\n") != 1 {
				t.Fatalf("want one line, got %q", out)
			}
			if !strings.Contains(out, tc.want) || !strings.Contains(out, tc.extra) || !strings.Contains(out, "fallback=kprobe") {
				t.Errorf("got %q, want %q with %q and fallback=kprobe", out, tc.want, tc.extra)
			}
			if strings.Contains(out, memlock) {
				t.Errorf("the misleading MEMLOCK hint is logged: %q", out)
			}
		})
	}
}

// TestStartLogsNoMemlockHint starts a collector on this kernel: whichever
// way the core attaches, nothing it logs suggests raising MEMLOCK (the
// collector removes the limit before loading), and on a kernel that refuses
// fentry the fallback is logged once, at debug, not as a warning.
func TestStartLogsNoMemlockHint(t *testing.T) {
	var buf bytes.Buffer
	c := newTestCollector(t, Config{Logger: slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))})
	out := buf.String()
	if strings.Contains(out, "MEMLOCK") {
		t.Errorf("start logged the MEMLOCK hint:\n%s", out)
	}
	t.Logf("core attached with %s", c.objs.method)
	if c.objs.method == "kprobe" && haveBTF() {
		if n := strings.Count(out, "level=DEBUG msg=fentry_fallback"); n != 1 {
			t.Errorf("the kprobe fallback is logged %d times at debug, want once:\n%s", n, out)
		}
		if strings.Contains(out, "level=WARN msg=fentry_") && !strings.Contains(out, "fentry_load_failed") {
			t.Errorf("an expected fallback is logged as a warning:\n%s", out)
		}
		if strings.Contains(out, "fentry_load_failed") {
			t.Errorf("fentry failed to load for a reason other than the kernel refusing or lacking it:\n%s", out)
		}
	}
}
