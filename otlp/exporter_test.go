package otlp

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/spanwatch/spanwatch/config/section"
	"github.com/spanwatch/spanwatch/snapshot"
)

func overrun(i int) *snapshot.Overrun {
	return &snapshot.Overrun{
		Time: time.Unix(1700000000, int64(i)), Span: "checkout", PID: 1234, TID: 1240, Comm: "shop",
		Identity:   snapshot.Identity{Namespace: "shop", Pod: "web-1", Container: "api", Cgroup: "/kubepods/pod1/c1"},
		DurationNs: 312e6, BudgetNs: 250e6, TraceID: "4bf92f3577b34da6a3ce929d0e0e4736", SpanID: "00f067aa0ba902b7",
		SourceLabels: map[string]string{"route": "/pay"},
		UserStack: []snapshot.Frame{
			{Function: "main.slowQuery", File: "/src/db.go", Line: 88},
			{Function: "main.checkout", File: "/src/api.go", Line: 31},
		},
	}
}

// otlpRequest is the part of an ExportLogsServiceRequest the tests read.
type otlpRequest struct {
	ResourceLogs []struct {
		Resource struct {
			Attributes []otlpAttr `json:"attributes"`
		} `json:"resource"`
		ScopeLogs []struct {
			Scope      struct{ Name string } `json:"scope"`
			LogRecords []struct {
				TimeUnixNano   string     `json:"timeUnixNano"`
				SeverityNumber int        `json:"severityNumber"`
				SeverityText   string     `json:"severityText"`
				EventName      string     `json:"eventName"`
				Body           otlpValue  `json:"body"`
				Attributes     []otlpAttr `json:"attributes"`
				TraceID        string     `json:"traceId"`
				SpanID         string     `json:"spanId"`
			} `json:"logRecords"`
		} `json:"scopeLogs"`
	} `json:"resourceLogs"`
}

type otlpAttr struct {
	Key   string    `json:"key"`
	Value otlpValue `json:"value"`
}

type otlpValue struct {
	StringValue *string `json:"stringValue"`
	IntValue    any     `json:"intValue"`
	BoolValue   *bool   `json:"boolValue"`
}

func (v otlpValue) String() string {
	switch {
	case v.StringValue != nil:
		return *v.StringValue
	case v.IntValue != nil:
		switch n := v.IntValue.(type) {
		case string:
			return n
		case float64:
			return strings.TrimSuffix(strings.TrimRight(strings.TrimRight(json.Number(jsonFloat(n)).String(), "0"), "."), ".")
		}
	case v.BoolValue != nil:
		if *v.BoolValue {
			return "true"
		}
		return "false"
	}
	return ""
}

func jsonFloat(f float64) string { b, _ := json.Marshal(f); return string(b) }

func attrs(as []otlpAttr) map[string]string {
	m := map[string]string{}
	for _, a := range as {
		m[a.Key] = a.Value.String()
	}
	return m
}

// checkRecords checks the records of requests against n overruns made by
// overrun().
func checkRecords(t *testing.T, reqs []otlpRequest, n int) {
	t.Helper()
	seen := 0
	for _, r := range reqs {
		for _, rl := range r.ResourceLogs {
			if res := attrs(rl.Resource.Attributes); res["service.name"] != "spanwatch" || res["host.name"] != "node1" {
				t.Errorf("resource %v", res)
			}
			for _, sl := range rl.ScopeLogs {
				for _, lr := range sl.LogRecords {
					seen++
					a := attrs(lr.Attributes)
					want := map[string]string{"spanwatch.span.name": "checkout", "spanwatch.duration_ns": "312000000", "spanwatch.budget_ns": "250000000",
						"process.pid": "1234", "thread.id": "1240", "process.executable.name": "shop", "k8s.namespace.name": "shop", "k8s.pod.name": "web-1",
						"k8s.container.name": "api", "spanwatch.cgroup": "/kubepods/pod1/c1", "spanwatch.label.route": "/pay"}
					for k, v := range want {
						if a[k] != v {
							t.Errorf("attribute %s = %q, want %q (all: %v)", k, a[k], v, a)
						}
					}
					if lr.TraceID != "4bf92f3577b34da6a3ce929d0e0e4736" || lr.SpanID != "00f067aa0ba902b7" || lr.EventName != EventName || lr.SeverityNumber != 13 || lr.SeverityText != "WARN" {
						t.Errorf("record ids %q %q, event %q, severity %d %q", lr.TraceID, lr.SpanID, lr.EventName, lr.SeverityNumber, lr.SeverityText)
					}
					if body := lr.Body.String(); !strings.HasPrefix(body, "span checkout took 312ms, over its 250ms budget\n") || !strings.Contains(body, "main.slowQuery (/src/db.go:88)") {
						t.Errorf("body %q", body)
					}
				}
			}
		}
	}
	if seen != n {
		t.Errorf("%d records, want %d", seen, n)
	}
}

func newExporter(t *testing.T, cfg Config) *Exporter {
	t.Helper()
	e, err := New(cfg, map[string]string{"service.name": "spanwatch", "host.name": "node1"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// TestExporterRetriesAndHeaders sends through an endpoint that answers
// 503 twice: every record arrives once, with the headers and the token.
func TestExporterRetriesAndHeaders(t *testing.T) {
	var mu sync.Mutex
	var reqs []otlpRequest
	var calls atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if calls.Add(1) <= 2 {
			http.Error(w, "busy", http.StatusServiceUnavailable)
			return
		}
		if r.URL.Path != "/v1/logs" || r.Header.Get("Content-Type") != "application/json" || r.Header.Get("X-Team") != "shop" || r.Header.Get("Authorization") != "Bearer s3cret" {
			t.Errorf("request %s %v", r.URL.Path, r.Header)
		}
		var req otlpRequest
		b, _ := io.ReadAll(r.Body)
		if err := json.Unmarshal(b, &req); err != nil {
			t.Errorf("body: %v", err)
		}
		mu.Lock()
		reqs = append(reqs, req)
		mu.Unlock()
		w.Write([]byte("{}"))
	}))
	defer srv.Close()
	tok := filepath.Join(t.TempDir(), "token")
	os.WriteFile(tok, []byte("s3cret\n"), 0o600)
	e := newExporter(t, Config{Endpoint: srv.URL, Headers: map[string]string{"X-Team": "shop"}, BearerTokenFile: tok, Timeout: 2 * time.Second})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { e.Run(ctx); close(done) }()
	for i := range 10 {
		e.Overrun(overrun(i))
	}
	deadline := time.Now().Add(20 * time.Second)
	for e.Stats().Sent < 10 && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	cancel()
	<-done
	if st := e.Stats(); st.Queued != 10 || st.Sent != 10 || st.Dropped+st.Failed+st.Rejected != 0 {
		t.Errorf("stats %+v", st)
	}
	mu.Lock()
	defer mu.Unlock()
	checkRecords(t, reqs, 10)
}

// TestExporterCounts checks what is not sent is counted: a full queue
// drops, a 400 fails at once, a partial success rejects.
func TestExporterCounts(t *testing.T) {
	var status atomic.Int32
	status.Store(http.StatusBadRequest)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		if s := int(status.Load()); s != 200 {
			http.Error(w, "bad request", s)
			return
		}
		w.Write([]byte(`{"partialSuccess":{"rejectedLogRecords":"1","errorMessage":"one too old"}}`))
	}))
	defer srv.Close()
	e := newExporter(t, Config{Endpoint: srv.URL, QueueSize: 3, Timeout: time.Second})
	for i := range 5 {
		e.Overrun(overrun(i)) // nobody reads the queue yet: 3 fit
	}
	if st := e.Stats(); st.Queued != 3 || st.Dropped != 2 {
		t.Fatalf("stats %+v, want 3 queued and 2 dropped", st)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { e.Run(ctx); close(done) }()
	deadline := time.Now().Add(10 * time.Second)
	for e.Stats().Failed < 3 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	status.Store(200)
	e.Overrun(overrun(9))
	e.Overrun(overrun(10))
	for e.Stats().Sent+e.Stats().Rejected < 2 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	cancel()
	<-done
	if st := e.Stats(); st.Failed != 3 || st.Sent != 1 || st.Rejected != 1 {
		t.Errorf("stats %+v, want 3 failed (400 is not retried), 1 sent, 1 rejected", st)
	}
}

func TestDecode(t *testing.T) {
	parse := func(src string) (*Config, error) {
		var doc yaml.Node
		if err := yaml.Unmarshal([]byte(src), &doc); err != nil {
			t.Fatal(err)
		}
		d := section.NewDecoder("spanwatch.yaml", []byte(src))
		root := doc.Content[0]
		var n *yaml.Node
		for i := 0; i+1 < len(root.Content); i += 2 {
			if root.Content[i].Value == "otlp" {
				n = root.Content[i+1]
			}
		}
		cfg := Decode(d, n)
		return cfg, d.Err()
	}
	cfg, err := parse("otlp:\n  endpoint: http://collector:4318/\n  headers: {x-team: shop}\n  timeout: 5s\n  queue_size: 100\n  profiles: true\n")
	if err != nil || cfg.Endpoint != "http://collector:4318" || cfg.Headers["x-team"] != "shop" || cfg.Timeout != 5*time.Second || cfg.QueueSize != 100 || !cfg.Profiles {
		t.Errorf("cfg %+v, %v", cfg, err)
	}
	if cfg, err := parse("rules: []\n"); cfg != nil || err != nil {
		t.Errorf("no section: %+v, %v", cfg, err)
	}
	_, err = parse("otlp:\n  endpoint: grpc://collector:4317\n  headers: {content-type: x, \"bad name\": y}\n  timeout: -1s\n  queue_size: 0\n  insecure: true\n  profiles: yes\n")
	want := []string{
		`spanwatch.yaml:2:13: otlp: endpoint: scheme must be http or https (OTLP/HTTP)`,
		`spanwatch.yaml:3:13: otlp: header content-type is set by spanwatch`,
		`spanwatch.yaml:3:30: otlp: header name "bad name": want letters, digits and -`,
		`spanwatch.yaml:4:12: otlp: timeout "-1s": want a positive duration like 10s`,
		`spanwatch.yaml:5:15: otlp: queue_size must be a whole number from 1 to 1048576`,
		`spanwatch.yaml:6:3: otlp: unknown key "insecure"`,
		`spanwatch.yaml:7:13: otlp: profiles must be true or false`,
	}
	if err == nil {
		t.Fatal("no error")
	}
	got := strings.Split(err.Error(), "\n")
	// The decoder reports unknown keys first; the file's order is by
	// position.
	sort.Slice(got, func(i, j int) bool {
		var li, ci, lj, cj int
		fmt.Sscanf(strings.TrimPrefix(got[i], "spanwatch.yaml:"), "%d:%d", &li, &ci)
		fmt.Sscanf(strings.TrimPrefix(got[j], "spanwatch.yaml:"), "%d:%d", &lj, &cj)
		return li < lj || li == lj && ci < cj
	})
	for i, w := range want {
		if i >= len(got) || !strings.HasPrefix(got[i], w) {
			t.Errorf("error %d:\n got %q\nwant %q\n(all: %v)", i, got[min(i, len(got)-1)], w, err)
		}
	}
	if _, err := parse("otlp:\n  timeout: 1s\n"); err == nil || !strings.Contains(err.Error(), "spanwatch.yaml:2:3: otlp: missing endpoint") {
		t.Errorf("no endpoint: %v", err)
	}
}

// TestExporterStopsWithARequestOut stops the exporter while its request
// is out, and again while it waits to retry: each batch gets one last
// try, not cut by the stop, and arrives.
func TestExporterStopsWithARequestOut(t *testing.T) {
	for _, first := range []int{http.StatusOK, http.StatusServiceUnavailable} {
		t.Run(strconv.Itoa(first), func(t *testing.T) {
			var calls atomic.Int32
			var got atomic.Int32
			arrived := make(chan struct{}, 4)
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				n := calls.Add(1)
				arrived <- struct{}{}
				var req otlpRequest
				b, _ := io.ReadAll(r.Body)
				json.Unmarshal(b, &req)
				if n == 1 {
					if first != http.StatusOK {
						http.Error(w, "busy", first) // retried after a wait
						return
					}
					// Held until the client gives up: the stop cancels it.
					<-r.Context().Done()
					return
				}
				for _, rl := range req.ResourceLogs {
					for _, sl := range rl.ScopeLogs {
						got.Add(int32(len(sl.LogRecords)))
					}
				}
				w.Write([]byte("{}"))
			}))
			defer srv.Close()
			e := newExporter(t, Config{Endpoint: srv.URL, Timeout: 5 * time.Second})
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan struct{})
			go func() { e.Run(ctx); close(done) }()
			for i := range 3 {
				e.Overrun(overrun(i))
			}
			<-arrived // the first request is out (or answered 503)
			cancel()
			<-done
			if st := e.Stats(); got.Load() != 3 || st.Sent != 3 || st.Failed != 0 || calls.Load() != 2 {
				t.Errorf("%d records arrived in %d requests, stats %+v; want 3 sent by a last try", got.Load(), calls.Load(), st)
			}
		})
	}
}

// TestExporterProfiles sends overruns with profiles: true to an endpoint
// that takes the logs and answers the profile with a partial success
// rejecting it: the profile request is protobuf, carries the development
// version, and its samples count as rejected; the records as sent.
func TestExporterProfiles(t *testing.T) {
	var profiles atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		switch r.URL.Path {
		case "/v1/logs":
			w.Write([]byte("{}"))
		case "/v1development/profiles":
			if ct, v := r.Header.Get("Content-Type"), r.Header.Get("Otlp-Profiles-Development-Version"); ct != "application/x-protobuf" || v != "1" {
				t.Errorf("profiles request: content type %q, version %q", ct, v)
			}
			profiles.Add(1)
			// ExportProfilesServiceResponse{partial_success: {rejected_profiles: 1, error_message: "no"}}
			w.Header().Set("Content-Type", "application/x-protobuf")
			w.Write([]byte{0x0a, 0x06, 0x08, 0x01, 0x12, 0x02, 'n', 'o'})
		default:
			t.Errorf("path %s", r.URL.Path)
		}
	}))
	defer srv.Close()
	e := newExporter(t, Config{Endpoint: srv.URL, Profiles: true, Timeout: 2 * time.Second})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { e.Run(ctx); close(done) }()
	for i := range 5 {
		e.Overrun(overrun(i))
	}
	deadline := time.Now().Add(10 * time.Second)
	for e.Stats().ProfileSamples.Rejected < 5 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	cancel()
	<-done
	if st := e.Stats(); st.Sent != 5 || st.ProfileSamples != (SignalStats{Rejected: 5}) || profiles.Load() != 1 {
		t.Errorf("stats %+v after %d profile requests; want 5 records sent, 5 samples rejected in 1 request", st, profiles.Load())
	}
}
