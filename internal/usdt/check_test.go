package usdt

import (
	"fmt"
	"runtime"
	"strings"
	"testing"

	"github.com/spanwatch/spanwatch/internal/bpftest"
)

// buildService builds testdata/service.c the way its authors would, or
// skips when gcc or sys/sdt.h is missing.
func buildService(t *testing.T) string {
	t.Helper()
	if runtime.GOARCH != "amd64" {
		t.Skip("the test program's probes are written for x86-64")
	}
	return bpftest.CProgram(t, "service")
}

// TestParseSourcesChecksBinary checks sources against the probes of a
// binary that is present: every problem at once, each at its
// file:line:col, with the nearest probe name for a near miss.
func TestParseSourcesChecksBinary(t *testing.T) {
	bin := buildService(t)
	good := fmt.Sprintf(`
sources:
  usdt:
    - binary: %[1]s
      name_arg: 0
      start: {provider: svc, probe: request__start}
      end: {provider: svc, probe: request__done}
      error: "arg0 >= 500 and arg1 < 0"
      labels: {status: arg0}
    - binary: %[1]s
      metric: queue_delta
      probe: {provider: svc, probe: queue}
      value_arg: 0
    - binary: /nonexistent/bin/service
      span: elsewhere
      probe: {provider: svc, probe: whatever}
`, bin)
	if _, err := ParseSources("f.yaml", sourcesNode(t, good)); err != nil {
		t.Fatalf("a good file: %v", err)
	}

	bad := fmt.Sprintf(`
sources:
  usdt:
    - binary: %[1]s
      name_arg: 0
      start: {provider: svc, probe: request__start}
      end: {provider: svc, probe: request_done}
    - binary: %[1]s
      name_arg: 1
      start: {provider: svc, probe: request__start}
      end: {provider: svc, probe: request__done}
      error: "arg0 >= 500 and arg3 != 0"
      labels: {status: arg0, x: arg2}
    - binary: %[1]s
      name_arg: 0
      probe: {provider: svc, probe: rec__enter}
    - binary: %[1]s
      span: q
      probe: {provider: sv, probe: queue}
      duration_arg: 0
    - binary: %[1]s
      metric: m
      probe: {provider: svc, probe: queue}
      value_arg: 1
    - binary: /etc/hostname
      span: h
      probe: {provider: a, probe: b}
`, bin)
	_, err := ParseSources("f.yaml", sourcesNode(t, bad))
	if err == nil {
		t.Fatal("no error")
	}
	want := []string{
		"f.yaml:7:35: probe svc:request_done not found in " + bin + ": did you mean request__done?",
		"f.yaml:9:17: name_arg reads arg1, but svc:request__start has 1 argument at ",
		"f.yaml:12:31: error reads arg3, but svc:request__done has 2 arguments at ",
		"\targ0 >= 500 and arg3 != 0\n\t                ^",
		"f.yaml:13:33: label x reads arg2, but svc:request__done has 2 arguments",
		"f.yaml:15:17: name_arg: arg0 of svc:rec__enter is a 4-byte value at ",
		"f.yaml:19:36: probe sv:queue not found in " + bin + ": did you mean svc:queue?",
		"f.yaml:24:18: value_arg reads arg1, but svc:queue has 1 argument",
		"f.yaml:25:15: read probes of /etc/hostname:",
	}
	msg := err.Error()
	for _, w := range want {
		if !strings.Contains(msg, w) {
			t.Errorf("error\n%s\ndoes not contain\n%s", msg, w)
		}
	}
	if n := strings.Count(msg, "f.yaml:"); n != len(want)-1 {
		t.Errorf("%d errors, want %d:\n%s", n, len(want)-1, msg)
	}
}
