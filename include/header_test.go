package include

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/spanwatch/spanwatch/emit"
)

// build compiles test/spanwatch_test.c with cc and flags into a temporary
// directory, skipping when the compiler is missing.
func build(t testing.TB, cc string, flags ...string) string {
	t.Helper()
	if _, err := exec.LookPath(cc); err != nil {
		t.Skipf("%s not installed (Debian package build-essential or clang)", cc)
	}
	bin := filepath.Join(t.TempDir(), "spanwatch_test")
	args := append([]string{"-Wall", "-Wextra", "-Werror", "-O2"}, flags...)
	args = append(args, "-o", bin, "test/spanwatch_test.c")
	if out, err := exec.Command(cc, args...).CombinedOutput(); err != nil {
		t.Fatalf("%s %s: %v\n%s", cc, strings.Join(args, " "), err, out)
	}
	return bin
}

func run(t *testing.T, bin string, args ...string) (string, int) {
	t.Helper()
	out, err := exec.Command(bin, args...).Output()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
		t.Logf("stderr: %s", ee.Stderr)
	} else if err != nil {
		t.Fatal(err)
	}
	return string(out), code
}

// TestCompilers builds the test program, whose static asserts compare
// struct spanwatch_event with struct span_event field by field, with each
// compiler and language mode an application might use.
func TestCompilers(t *testing.T) {
	for _, tc := range []struct {
		cc    string
		flags []string
	}{
		{"gcc", nil},
		{"gcc", []string{"-std=c11", "-D_POSIX_C_SOURCE=200809L", "-pedantic"}},
		{"clang", nil},
		{"clang-14", []string{"-std=gnu99"}},
	} {
		t.Run(tc.cc+strings.Join(tc.flags, ""), func(t *testing.T) {
			bin := build(t, tc.cc, tc.flags...)
			if out, code := run(t, bin, "format"); code != 0 || out == "" {
				t.Fatalf("format: exit %d, output %q", code, out)
			}
		})
	}
	t.Run("g++", func(t *testing.T) {
		if _, err := exec.LookPath("g++"); err != nil {
			t.Skip("g++ not installed (Debian package build-essential)")
		}
		dir := t.TempDir()
		src := filepath.Join(dir, "use.cc")
		os.WriteFile(src, []byte(`#include "spanwatch.h"
static struct spanwatch sw;
int main() {
	spanwatch_open(&sw);
	struct spanwatch_span s;
	spanwatch_span_start(&s, "cxx");
	int r = spanwatch_span_end(&sw, &s, 0);
	spanwatch_close(&sw);
	return r;
}
`), 0o644)
		wd, _ := os.Getwd()
		out, err := exec.Command("g++", "-std=c++11", "-Wall", "-Wextra", "-Werror", "-I", wd, "-o", filepath.Join(dir, "use"), src).CombinedOutput()
		if err != nil {
			t.Fatalf("g++: %v\n%s", err, out)
		}
		if err := exec.Command(filepath.Join(dir, "use")).Run(); err != nil {
			t.Fatalf("C++ program: %v", err)
		}
	})
}

// TestFormatMatchesGo checks that C registers the exact format string the
// Go SDK does: the kernel refuses a second registration whose format
// differs (EADDRINUSE).
func TestFormatMatchesGo(t *testing.T) {
	out, code := run(t, build(t, "gcc"), "format")
	if code != 0 {
		t.Fatalf("exit %d", code)
	}
	if got := strings.TrimSuffix(out, "\n"); got != emit.Format {
		t.Fatalf("SPANWATCH_FORMAT\n got  %q\n want %q (emit.Format)", got, emit.Format)
	}
}

// TestPayloadBytes checks the bytes spanwatch_emit hands writev: the
// 4-byte write index, then struct span_event as bpf/span_event.h lays it
// out, the name filling at most its 128 bytes exactly as the Go SDK's.
func TestPayloadBytes(t *testing.T) {
	bin := build(t, "gcc")
	for _, name := range []string{"checkout", strings.Repeat("abcdefghij", 14)} {
		out, code := run(t, bin, "stdout", name)
		if code != 0 {
			t.Fatalf("exit %d", code)
		}
		var want bytes.Buffer
		le := binary.LittleEndian
		want.Write(le.AppendUint32(nil, 7))       // write_index
		want.Write(le.AppendUint64(nil, 1234567)) // duration_ns
		want.Write(le.AppendUint64(nil, 42))      // start_ns
		want.Write(le.AppendUint32(nil, 1))       // status: error
		want.Write(le.AppendUint32(nil, 0))       // flags
		for i := range 16 {
			want.WriteByte(byte(i + 1))
		}
		for i := range 8 {
			want.WriteByte(byte(0xa1 + i))
		}
		want.Write(le.AppendUint64(nil, 0)) // exec_id
		var n [128]byte
		copy(n[:], name) // what the Go SDK does
		want.Write(n[:])
		if !bytes.Equal([]byte(out), want.Bytes()) {
			t.Errorf("name %q: payload\n got  %x\n want %x", name, out, want.Bytes())
		}
	}
}

// TestBeginPayload checks the start event spanwatch_span_begin writes:
// SPANWATCH_F_START, duration 0, the start time (CLOCK_REALTIME) that the
// end repeats, the name, no ids.
func TestBeginPayload(t *testing.T) {
	bin := build(t, "gcc")
	out, code := run(t, bin, "begin", "checkout")
	if code != 0 {
		t.Fatalf("exit %d", code)
	}
	le := binary.LittleEndian
	const size = 4 + 184
	if len(out) != 2*size {
		t.Fatalf("%d bytes written, want two payloads of %d", len(out), size)
	}
	var want bytes.Buffer
	want.Write(le.AppendUint32(nil, 7))  // write_index
	want.Write(le.AppendUint64(nil, 0))  // duration_ns
	want.Write(le.AppendUint64(nil, 42)) // start_ns
	want.Write(le.AppendUint32(nil, 0))  // status
	want.Write(le.AppendUint32(nil, 1))  // flags: SPANWATCH_F_START
	want.Write(make([]byte, 16+8+8))     // trace_id, span_id, exec_id
	var n [128]byte
	copy(n[:], "checkout")
	want.Write(n[:])
	if got := []byte(out[:size]); !bytes.Equal(got, want.Bytes()) {
		t.Errorf("begin payload\n got  %x\n want %x", got, want.Bytes())
	}
	// spanwatch_span_begin itself: the clock's start time, else the same.
	got := []byte(out[size:])
	start := le.Uint64(got[12:20])
	if now := uint64(time.Now().UnixNano()); start > now || now-start > uint64(time.Minute) {
		t.Errorf("begin start_ns %d, want about now (%d)", start, now)
	}
	copy(got[12:20], want.Bytes()[12:20])
	if !bytes.Equal(got, want.Bytes()) {
		t.Errorf("spanwatch_span_begin payload\n got  %x\n want %x (but start_ns)", got, want.Bytes())
	}
}

// haveMarker says whether the header has a marker on this architecture.
func haveMarker() bool { return runtime.GOARCH == "amd64" || runtime.GOARCH == "arm64" }

// TestFallback checks that a failed user_events registration falls back
// to the marker (x86-64, arm64), or to nothing when SPANWATCH_EMIT=user_events
// insists, and that either reports nobody listening, emits nothing and
// closes cleanly.
func TestFallback(t *testing.T) {
	bin := build(t, "gcc")
	dir := t.TempDir()
	file := filepath.Join(dir, "user_events_data")
	os.WriteFile(file, nil, 0o644)
	marker := 1 // SPANWATCH_MODE_MARKER
	if !haveMarker() {
		marker = 3
	}
	for _, tc := range []struct {
		path  string
		errno syscall.Errno
	}{
		{filepath.Join(dir, "missing"), syscall.ENOENT}, // no tracefs or no CONFIG_USER_EVENTS
		{file, syscall.ENOTTY},                          // not user_events_data
		{dir, syscall.EISDIR},
	} {
		for _, strict := range []bool{false, true} {
			cmd := exec.Command(bin, "fallback", tc.path)
			mode := marker
			if strict {
				cmd.Env = append(os.Environ(), "SPANWATCH_EMIT=user_events")
				mode = 3 // SPANWATCH_MODE_OFF
			}
			out, err := cmd.Output()
			if want := fmt.Sprintf("fallback errno=%d mode=%d\n", int(tc.errno), mode); err != nil || string(out) != want {
				t.Errorf("fallback %s (strict %v): %v, output %q, want %q (%v)", tc.path, strict, err, out, want, tc.errno)
			}
		}
	}
}

// TestNoMarker builds the header as on architectures without the marker
// (SPANWATCH_NO_MARKER: a plain C probe word, no assembly): where
// user_events cannot be registered it falls back to nothing.
func TestNoMarker(t *testing.T) {
	bin := build(t, "gcc", "-DSPANWATCH_NO_MARKER")
	out, code := run(t, bin, "fallback", filepath.Join(t.TempDir(), "missing"))
	if want := fmt.Sprintf("fallback errno=%d mode=3\n", int(syscall.ENOENT)); code != 0 || out != want {
		t.Errorf("fallback: exit %d, output %q, want %q", code, out, want)
	}
	if _, code := run(t, bin, "marker"); code == 0 {
		t.Error("a build without the marker says it has one")
	}
}

// TestProbeLayout checks, in a program built from the header, the probe
// the agent looks for (the magic, the marker's distance, a nop and a ret
// there); collector's TestCMarkerFound finds it from outside.
func TestProbeLayout(t *testing.T) {
	if !haveMarker() {
		t.Skipf("the header has no marker on %s", runtime.GOARCH)
	}
	if out, code := run(t, build(t, "gcc"), "marker"); code != 0 || out != "marker ok\n" {
		t.Fatalf("marker: exit %d, output %q", code, out)
	}
}

// TestOpenOnHost registers through this host's tracefs: on a kernel with
// user_events it must register; without, it must fall back with ENOENT.
func TestOpenOnHost(t *testing.T) {
	bin := build(t, "gcc")
	out, code := run(t, bin, "open")
	if code != 0 {
		t.Fatalf("open: exit %d, output %q", code, out)
	}
	var have bool
	for _, d := range []string{"/sys/kernel/tracing", "/sys/kernel/debug/tracing"} {
		if _, err := os.Stat(filepath.Join(d, "user_events_data")); err == nil {
			have = true
		}
	}
	switch {
	case have && os.Geteuid() == 0:
		if !strings.HasPrefix(out, "registered write_index=") {
			t.Fatalf("user_events is present but open printed %q", out)
		}
	case have:
		t.Logf("user_events present, not root: %s", out)
	default:
		mode := 1 // the marker
		if !haveMarker() {
			mode = 3
		}
		if out != fmt.Sprintf("fallback errno=%d mode=%d\n", int(syscall.ENOENT), mode) {
			t.Fatalf("no user_events here, want the ENOENT fallback, got %q", out)
		}
		t.Log("kernel without user_events (or tracefs not mounted): checked the fallback; the VM harness runs 'spanwatch_test emit' against a kernel with CONFIG_USER_EVENTS")
	}
}
