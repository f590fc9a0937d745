//go:build linux

package agent

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/spanwatch/spanwatch/collector"
	"github.com/spanwatch/spanwatch/config"
)

// TestOverrunsToOTLP runs the agent with an otlp: section and a budget on
// a span that a child process ends over its budget five times with a
// trace id: each overrun arrives at the OTLP/HTTP endpoint as a log record
// with the trace id, its own span id, the span's name and the stack.
func TestOverrunsToOTLP(t *testing.T) {
	requireRoot(t)
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	type rec struct {
		TraceID, SpanID string
		Body            struct{ StringValue string }
		Attributes      []struct {
			Key   string
			Value struct {
				StringValue string
				BoolValue   *bool
			}
		}
	}
	var recs []rec
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var req struct {
			ResourceLogs []struct {
				ScopeLogs []struct {
					LogRecords []rec `json:"logRecords"`
				} `json:"scopeLogs"`
			} `json:"resourceLogs"`
		}
		b, _ := io.ReadAll(r.Body)
		if err := json.Unmarshal(b, &req); err != nil {
			t.Errorf("OTLP body: %v", err)
		}
		mu.Lock()
		for _, rl := range req.ResourceLogs {
			for _, sl := range rl.ScopeLogs {
				recs = append(recs, sl.LogRecords...)
			}
		}
		mu.Unlock()
		w.Write([]byte("{}"))
	}))
	defer srv.Close()

	span := fmt.Sprintf("otlp.test.%d", os.Getpid())
	const trace = "4bf92f3577b34da6a3ce929d0e0e4736"
	file := fmt.Sprintf("budgets:\n  - {span: %s, budget: 2ms}\notlp:\n  endpoint: %s\n", span, srv.URL)
	cfg, err := config.Parse("rules.yaml", []byte(file),
		config.LoadOptions{Collector: config.CollectorSettings{Interval: 300 * time.Millisecond, Binaries: []string{exe}, ScanInterval: -1, Sources: []string{"marker"}}})
	if err != nil {
		t.Fatal(err)
	}
	var logs syncBuffer
	a, err := New(cfg, Options{Logger: testLogger(&logs)})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	ready := make(chan struct{})
	a.opts.OnReady = func(*collector.Collector) { close(ready) }
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	select {
	case <-ready:
	case err := <-done:
		t.Fatalf("agent stopped before it was ready: %v\n%s", err, logs.String())
	}
	cmd := emitter(t, 5, span, 0)
	cmd.Env = append(cmd.Env, "SPANWATCH_TEST_TRACE="+trace, "SPANWATCH_TEST_SLOW=10ms")
	if err := cmd.Run(); err != nil {
		t.Fatalf("emitter: %v\n%s", err, logs.String())
	}
	// The records that are queued when the agent stops go out then.
	time.Sleep(time.Second)
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Run: %v", err)
	}
	mu.Lock()
	defer mu.Unlock()
	ids := map[string]bool{}
	for _, r := range recs {
		name, running := "", false
		for _, a := range r.Attributes {
			switch a.Key {
			case "spanwatch.span.name":
				name = a.Value.StringValue
			case "spanwatch.still_running":
				running = a.Value.BoolValue != nil && *a.Value.BoolValue
			}
		}
		if name != span {
			continue
		}
		// The in-flight sampler may catch a 10 ms span past its 2 ms
		// budget while it runs (under -race it often does): that record
		// says so, and the span's ids come with its end.
		if running {
			if !strings.HasPrefix(r.Body.StringValue, "span "+span+" has been running for ") {
				t.Errorf("still-running record %.200q", r.Body.StringValue)
			}
			continue
		}
		ids[r.SpanID] = true
		if r.TraceID != trace || !strings.HasPrefix(r.Body.StringValue, "span "+span+" took ") {
			t.Errorf("record trace %q span %q body %.200q", r.TraceID, r.SpanID, r.Body.StringValue)
		}
	}
	for i := 1; i <= 5; i++ {
		if id := fmt.Sprintf("%016x", i); !ids[id] {
			t.Errorf("no record for span id %s (got %v)\n%s", id, ids, logs.String())
		}
	}
	if st := a.otlp.Stats(); st.Failed+st.Dropped+st.Rejected != 0 {
		t.Errorf("otlp stats %+v", st)
	}
}
