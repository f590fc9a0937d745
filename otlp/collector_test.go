package otlp

import (
	"bufio"
	"context"
	"encoding/json"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestOpenTelemetryCollector sends overruns to the OpenTelemetry
// Collector's own OTLP receiver (test/otelcol: the receiver built from
// the Collector's Go modules, printing what it decodes as OTLP/JSON) and
// checks every record arrives as sent: ids, attributes, body, resource.
func TestOpenTelemetryCollector(t *testing.T) {
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
	addr := ln.Addr().String()
	ln.Close()
	col := exec.Command(bin, "-http", addr)
	stdout, _ := col.StdoutPipe()
	col.Stderr = os.Stderr
	if err := col.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { col.Process.Signal(os.Interrupt); col.Wait() }()
	var mu sync.Mutex
	var reqs []otlpRequest
	var lines int
	go func() {
		sc := bufio.NewScanner(stdout)
		sc.Buffer(nil, 16<<20)
		for sc.Scan() {
			var r otlpRequest
			if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
				t.Errorf("collector output: %v: %.200s", err, sc.Text())
				continue
			}
			mu.Lock()
			reqs, lines = append(reqs, r), lines+1
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
	for time.Now().Before(deadline) {
		mu.Lock()
		got := 0
		for _, r := range reqs {
			for _, rl := range r.ResourceLogs {
				for _, sl := range rl.ScopeLogs {
					got += len(sl.LogRecords)
				}
			}
		}
		mu.Unlock()
		if got >= n {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	mu.Lock()
	defer mu.Unlock()
	checkRecords(t, reqs, n)
	if len(reqs) > 0 && !strings.Contains(reqs[0].ResourceLogs[0].ScopeLogs[0].Scope.Name, "spanwatch") {
		t.Errorf("scope %q", reqs[0].ResourceLogs[0].ScopeLogs[0].Scope.Name)
	}
	t.Logf("%d records in %d batches through the Collector's OTLP receiver", n, lines)
}
