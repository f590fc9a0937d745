package otlp

import (
	"bufio"
	"context"
	"encoding/json"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/spanwatch/spanwatch/snapshot"
)

// TestOpenTelemetryCollector sends overruns to the OpenTelemetry
// Collector's own OTLP receiver (test/otelcol: the receiver built from
// the Collector's Go modules, printing what it decodes as OTLP/JSON) and
// checks every record arrives as sent: ids, attributes, body, resource.
// startCollector builds and starts test/otelcol, the OpenTelemetry
// Collector's own OTLP receiver, and returns its address and what it has
// printed so far (a line a batch, OTLP/JSON).
func startCollector(t *testing.T) (addr string, lines func() [][]byte) {
	t.Helper()
	if testing.Short() {
		t.Skip("-short: builds the OpenTelemetry Collector's receiver")
	}
	gobin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command to build test/otelcol")
	}
	bin := filepath.Join(t.TempDir(), "otelcol")
	build := exec.Command(gobin, "build", "-o", bin, ".")
	build.Dir = "../test/otelcol"
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build test/otelcol (the Collector's modules come from the Go module proxy): %v\n%s", err, out)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr = ln.Addr().String()
	ln.Close()
	col := exec.Command(bin, "-http", addr)
	stdout, _ := col.StdoutPipe()
	col.Stderr = os.Stderr
	if err := col.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { col.Process.Signal(os.Interrupt); col.Wait() })
	var mu sync.Mutex
	var out [][]byte
	go func() {
		sc := bufio.NewScanner(stdout)
		sc.Buffer(nil, 16<<20)
		for sc.Scan() {
			mu.Lock()
			out = append(out, slices.Clone(sc.Bytes()))
			mu.Unlock()
		}
	}()
	for start := time.Now(); ; time.Sleep(50 * time.Millisecond) {
		if c, err := net.Dial("tcp", addr); err == nil {
			c.Close()
			break
		}
		if time.Since(start) > 30*time.Second {
			t.Fatal("the collector's receiver did not listen")
		}
	}
	return addr, func() [][]byte {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(out)
	}
}

// TestOpenTelemetryCollector sends overruns to the OpenTelemetry
// Collector's own OTLP receiver (test/otelcol: the receiver built from
// the Collector's Go modules, printing what it decodes as OTLP/JSON) and
// checks every record arrives as sent: ids, attributes, body, resource.
func TestOpenTelemetryCollector(t *testing.T) {
	addr, lines := startCollector(t)
	e := newExporter(t, Config{Endpoint: "http://" + addr})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { e.Run(ctx); close(done) }()
	const n = 700 // two batches
	for i := range n {
		e.Overrun(overrun(i))
	}
	deadline := time.Now().Add(30 * time.Second)
	for e.Stats().Sent < n && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	cancel()
	<-done
	if st := e.Stats(); st.Sent != n || st.Failed+st.Dropped+st.Rejected != 0 {
		t.Fatalf("stats %+v", st)
	}
	var reqs []otlpRequest
	for time.Now().Before(deadline) {
		reqs = reqs[:0]
		got := 0
		for _, l := range lines() {
			var r otlpRequest
			if err := json.Unmarshal(l, &r); err != nil {
				t.Fatalf("collector output: %v: %.200s", err, l)
			}
			reqs = append(reqs, r)
			for _, rl := range r.ResourceLogs {
				for _, sl := range rl.ScopeLogs {
					got += len(sl.LogRecords)
				}
			}
		}
		if got >= n {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	checkRecords(t, reqs, n)
	if len(reqs) > 0 && !strings.Contains(reqs[0].ResourceLogs[0].ScopeLogs[0].Scope.Name, "spanwatch") {
		t.Errorf("scope %q", reqs[0].ResourceLogs[0].ScopeLogs[0].Scope.Name)
	}
	t.Logf("%d records in %d batches through the Collector's OTLP receiver", n, len(reqs))
}

// TestOpenTelemetryCollectorProfiles sends overruns with profiles: true
// to the Collector's own OTLP receiver and reads the profiles it decoded
// (pprofile's OTLP/JSON): a sample an overrun, its stack's function
// names leaf first (an inlined run as one location), its span name
// attribute and its trace link, the dictionary holding each function
// once, and the log records as well.
func TestOpenTelemetryCollectorProfiles(t *testing.T) {
	addr, lines := startCollector(t)
	e := newExporter(t, Config{Endpoint: "http://" + addr, Profiles: true})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { e.Run(ctx); close(done) }()
	const n = 600 // two batches
	for i := range n {
		o := overrun(i)
		switch {
		case i == 3: // no stack, with a trace
			o.Span, o.UserStack, o.StackError = "nostack", nil, "no frames"
		case i%2 == 1: // a second stack, under the same caller, with a kernel frame on top
			o.Span = "refund"
			o.TraceID, o.SpanID = "", ""
			o.KernelStack = []snapshot.Frame{{Function: "do_sys_poll"}}
			o.UserStack = []snapshot.Frame{{Function: "main.refund", File: "/src/api.go", Line: 52, Inlined: true}, o.UserStack[1]}
		}
		e.Overrun(o)
	}
	deadline := time.Now().Add(30 * time.Second)
	for st := e.Stats(); (st.Sent < n || st.ProfileSamples.Sent < n) && time.Now().Before(deadline); st = e.Stats() {
		time.Sleep(50 * time.Millisecond)
	}
	cancel()
	<-done
	if st := e.Stats(); st.Sent != n || st.ProfileSamples != (SignalStats{Sent: n}) || st.Failed+st.Dropped+st.Rejected != 0 {
		t.Fatalf("stats %+v", st)
	}
	var profiles []profilesJSON
	for time.Now().Before(deadline) {
		profiles = profiles[:0]
		got := 0
		for _, l := range lines() {
			var p profilesJSON
			if err := json.Unmarshal(l, &p); err != nil {
				t.Fatalf("collector output: %v: %.200s", err, l)
			}
			if len(p.ResourceProfiles) > 0 {
				profiles = append(profiles, p)
				got += p.samples()
			}
		}
		if got >= n {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	checkProfiles(t, profiles, n)
	t.Logf("%d samples in %d profiles through the Collector's OTLP receiver", n, len(profiles))
}
