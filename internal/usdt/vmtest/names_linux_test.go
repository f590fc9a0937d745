//go:build linux

package vmtest

import (
	"bufio"
	"context"
	"io"
	"os"
	"os/exec"
	"testing"

	usdtsource "github.com/spanwatch/spanwatch/source/usdt"

	"github.com/spanwatch/spanwatch/collector"
	"github.com/spanwatch/spanwatch/internal/bpftest"
	"github.com/spanwatch/spanwatch/internal/usdt"
)

// serviceBinary returns internal/usdt/testdata/service.c built the way
// the list of test programs says (bpftest.CProgram): here, or by
// test/vm/run.sh for the VM, which has no compiler.
func serviceBinary(t *testing.T) string {
	t.Helper()
	return bpftest.CProgram(t, "service")
}

// TestNamesOnAbsentPages attaches a source named by a string literal on a
// page the process dropped (madvise), and expects every request counted
// under its route, read in the kernel where it can fault pages in (6.0+),
// through the tracer elsewhere.
func TestNamesOnAbsentPages(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root (CAP_BPF, CAP_PERFMON) to load BPF and attach uprobes")
	}
	bin := serviceBinary(t)
	c, err := collector.New(context.Background(), collector.Config{Sources: collector.Sources{Marker: true}, ScanInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	tr, err := usdtsource.Attach(context.Background(), c.SourceCore(), []usdt.SpanSource{{
		Binary: bin, NameArg: 0, KeyArg: -1, StatusArg: -1, DurationArg: -1, ValueArg: -1,
		Start: usdt.ProbeRef{Provider: "svc", Name: "request__start"}, End: usdt.ProbeRef{Provider: "svc", Name: "request__done"},
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	t.Logf("uprobes attached with %s, names read with %s", tr.UprobeMethod(), tr.NameMethod())
	cmd := exec.Command(bin)
	stdin, _ := cmd.StdinPipe()
	stdout, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Wait()
	defer stdin.Close()
	out := bufio.NewScanner(stdout)
	out.Scan() // ready
	io.WriteString(stdin, "z\nr 12 100\n")
	for out.Scan() && out.Text() != "ok" {
	}
	for out.Scan() && out.Text() != "ok" {
	}
	s, err := c.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]uint64{}
	for _, sr := range s.Series {
		got[sr.Span] += sr.Count
	}
	for _, route := range []string{"GET /api/orders", "POST /api/orders/{id}/pay", "GET /api/health", "GET /slow"} {
		if got[route] != 3 {
			t.Errorf("%s: %d spans, want 3 (series %v)", route, got[route], got)
		}
	}
	st, err := tr.Stats()
	if err != nil {
		t.Fatal(err)
	}
	if tr.NameMethod() != "probe_read" && st.NameFallback+st.NameCached != 0 {
		t.Errorf("%d names went through the tracer although the kernel reads them with %s", st.NameFallback+st.NameCached, tr.NameMethod())
	}
}
