//go:build linux

package include

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/spanwatch/spanwatch/collector"
	"github.com/spanwatch/spanwatch/internal/sdktest"
	"github.com/spanwatch/spanwatch/snapshot"
	"github.com/spanwatch/spanwatch/userevents"
)

// emitterEnv names a prebuilt spanwatch_test binary, for machines without a
// C compiler (the test VM): gcc -static -O2 -o spanwatch_test
// include/test/spanwatch_test.c.
const emitterEnv = "SPANWATCH_C_EMITTER"

// staticEmitter is where test/vm/run-all.sh puts a static build of
// test/spanwatch_test.c, shipped into the VM with the package's testdata.
const staticEmitter = "testdata/spanwatch_test.static"

// TestEmitThroughCollector sends spans from C (the header, and
// libspanwatch's C ABI) through the kernel's user_events to a real
// collector: counts, errors, budgets, and the trace
// and span ids the C program wrote, byte for byte. It needs root and a
// kernel with user_events (6.4+, CONFIG_USER_EVENTS), as in the test VM.
func TestEmitThroughCollector(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to load BPF and register user_events")
	}
	// Only in the test VM may the test mount tracefs (TracefsDir does,
	// as root); elsewhere it looks where tracefs is usually mounted.
	var err error
	if os.Getenv("SPANWATCH_IN_VM") == "1" {
		var dir string
		if dir, err = userevents.TracefsDir(); err == nil {
			_, err = os.Stat(filepath.Join(dir, "user_events_data"))
		}
	} else {
		_, err = os.Stat("/sys/kernel/tracing/user_events_data")
	}
	if err != nil {
		t.Skipf("no user_events here (needs Linux 6.4+ with CONFIG_USER_EVENTS): %v; the test VM can run it with a static build named by %s", err, emitterEnv)
	}
	bin := os.Getenv(emitterEnv)
	if bin == "" {
		// test/vm/run-all.sh leaves a static build here for the VM,
		// which has no compiler.
		if _, err := os.Stat(staticEmitter); err == nil {
			bin = staticEmitter
		} else if os.Getenv("SPANWATCH_IN_VM") == "1" {
			t.Fatalf("in the VM but %s is missing: test/vm/run-all.sh builds it", staticEmitter)
		} else {
			bin = build(t, "gcc")
		}
	}

	// The header's functions, then libspanwatch's C ABI (sdk/c/src/spanwatch.c,
	// compiled into the program): the same user_events path.
	for _, mode := range []string{"emit", "libemit"} {
		t.Run(mode, func(t *testing.T) { emitThroughCollector(t, bin, mode) })
	}
}

func emitThroughCollector(t *testing.T, bin, mode string) {
	c, err := collector.New(context.Background(), collector.Config{Sources: collector.Sources{UserEvents: true}, ScanInterval: -1})
	if err != nil {
		t.Fatalf("collector: %v", err)
	}
	defer c.Close()
	if ok, method := c.UserEventsAttached(); !ok {
		t.Fatalf("user_events source not attached (%s)", method)
	}
	// The C program's spans last 1 ms.
	if err := c.SetBudgets([]collector.BudgetRule{{Span: "c.span", Budget: 500 * time.Microsecond}}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Snapshot(); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(bin, mode, "200", "c.span").CombinedOutput()
	if err != nil {
		t.Fatalf("spanwatch_test %s: %v\n%s", mode, err, out)
	}
	if !strings.Contains(string(out), "enabled=1") {
		t.Fatalf("the C program saw no listener: %s", out)
	}

	var sr snapshot.Series
	var overruns []snapshot.Overrun
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline) && (sr.Count < 200 || len(overruns) < 200); {
		time.Sleep(100 * time.Millisecond)
		s, err := c.Snapshot()
		if err != nil {
			t.Fatal(err)
		}
		for _, x := range s.Series {
			if x.Span == "c.span" {
				sr.Count += x.Count
				sr.Errors += x.Errors
				sr.OverBudget += x.OverBudget
				sr.SumNs += x.SumNs
			}
		}
		overruns = append(overruns, s.Overruns...)
	}
	if sr.Count != 200 || sr.Errors != 20 || sr.OverBudget != 200 || sr.SumNs != 200*1_000_000 {
		t.Errorf("c.span: count %d errors %d over budget %d sum %d ns; want 200, 20, 200, 200 ms", sr.Count, sr.Errors, sr.OverBudget, sr.SumNs)
	}
	if len(overruns) != 200 {
		t.Fatalf("%d overruns, want 200", len(overruns))
	}
	for _, ov := range overruns {
		if ov.Span != "c.span" || ov.TraceID != "0102030405060708090a0b0c0d0e0f10" || ov.SpanID != "a1a2a3a4a5a6a7a8" || ov.DurationNs != 1_000_000 || ov.Source != "user_events" {
			t.Fatalf("overrun %+v: want c.span, trace 0102..10, span a1..a8, 1 ms, from user_events", ov)
		}
	}
}

// BenchmarkUserEventsSpanCost measures what a span costs a C program
// through user_events (the header's begin and end, a writev each), beside
// an empty call: with no tracer on the event, and with a collector
// attached. It needs a kernel with user_events, as in the test VM:
// test/vm/run.sh ./include -- -test.run '^$' -test.bench UserEvents.
func BenchmarkUserEventsSpanCost(b *testing.B) {
	if os.Geteuid() != 0 {
		b.Skip("needs root to register user_events and load BPF")
	}
	if _, err := userevents.TracefsDir(); err != nil {
		b.Skipf("no tracefs: %v", err)
	}
	bin := os.Getenv(emitterEnv)
	if bin == "" {
		if _, err := os.Stat(staticEmitter); err == nil {
			bin = staticEmitter
		} else {
			bin = build(b, "gcc")
		}
	}
	out, _ := exec.Command(bin, "open").Output()
	if !strings.HasPrefix(string(out), "registered") {
		b.Skipf("no user_events here (needs Linux 6.4+ with CONFIG_USER_EVENTS): %s", out)
	}
	sdktest.Costs(b, func(n int) *exec.Cmd { return exec.Command(bin, "bench", fmt.Sprint(n)) }, 10_000_000, 20_000)
}
