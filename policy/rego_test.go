package policy

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/spanwatch/spanwatch/snapshot"
)

// writePolicy writes a rule file with one policy and returns the parse
// result.
func writePolicy(t *testing.T, rego string, data map[string]string) (*Config, error) {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "p.rego"), []byte(rego), 0o644); err != nil {
		t.Fatal(err)
	}
	conf := "policies:\n  - file: p.rego\n"
	if len(data) > 0 {
		conf += "    data:\n"
	}
	for name, content := range data {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		conf += "      - " + name + "\n"
	}
	path := filepath.Join(dir, "rules.yaml")
	if err := os.WriteFile(path, []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	return LoadFile(path)
}

func TestRegoHTTPSendRefused(t *testing.T) {
	_, err := writePolicy(t, `package spanwatch

alerts contains {"labels": {"alertname": "X"}} if {
	r := http.send({"method": "GET", "url": "http://127.0.0.1:1/"})
	r.status_code == 200
}
`, nil)
	if err == nil {
		t.Fatal("a policy calling http.send loaded")
	}
	msg := err.Error()
	for _, want := range []string{"p.rego:4:7: ", "http.send is not allowed", "makes HTTP requests", "must not reach outside"} {
		if !strings.Contains(msg, want) {
			t.Errorf("error %q does not contain %q", msg, want)
		}
	}
}

func TestRegoSandboxCapabilities(t *testing.T) {
	for _, b := range sandboxCaps.Builtins {
		if deniedBuiltin(b.Name) != "" {
			t.Errorf("capabilities still hold %s", b.Name)
		}
	}
	if len(sandboxCaps.Builtins) < 100 {
		t.Errorf("only %d builtins left", len(sandboxCaps.Builtins))
	}
	// time.now_ns stays allowed.
	_, err := writePolicy(t, "package spanwatch\n\nalerts contains {\"labels\": {\"alertname\": \"Late\"}} if time.now_ns() > input.time_ns + 60000000000\n", nil)
	if err != nil {
		t.Fatalf("time.now_ns refused: %v", err)
	}
}

func TestRegoEval(t *testing.T) {
	cfg, err := LoadFile("testdata/good/full.yaml")
	if err != nil {
		t.Fatal(err)
	}
	snap := &snapshot.Snapshot{
		Time: time.Unix(1700000000, 0), WindowNs: 10e9,
		Series: []snapshot.Series{
			{Span: "checkout", Identity: snapshot.Identity{Container: "web-1"}, Count: 100, Errors: 2, ErrorRatio: 0.02}, // over 1% (json), under 2% (yaml)... equal: not over
			{Span: "search", Count: 100, Errors: 7, ErrorRatio: 0.07},                                                    // over 5% (json), under 10% (yaml)
			{Span: "login", Count: 10, Errors: 9, ErrorRatio: 0.9},                                                       // under min_count
			{Span: "empty"},
		},
	}
	in := Input(snap)
	for _, tc := range []struct {
		policy int
		spans  []string
	}{
		{0, []string{"checkout", "search"}},
		{1, nil},
	} {
		got, err := cfg.Policies[tc.policy].Eval(context.Background(), in)
		if err != nil {
			t.Fatal(err)
		}
		var spans []string
		for _, a := range got {
			if a.Labels["alertname"] != "ErrorBudgetBurn" || a.Labels["severity"] != "page" {
				t.Errorf("labels = %v", a.Labels)
			}
			spans = append(spans, a.Labels["span"])
		}
		if strings.Join(sortStrings(spans), ",") != strings.Join(tc.spans, ",") {
			t.Errorf("policy %s fired for %v, want %v", cfg.Policies[tc.policy].Name, spans, tc.spans)
		}
		for _, a := range got {
			if a.Labels["span"] == "search" && a.Annotations["summary"] != "search error ratio 7% is over its 5% budget" {
				t.Errorf("summary = %q", a.Annotations["summary"])
			}
			if a.Labels["span"] == "checkout" && a.Labels["container"] != "web-1" {
				t.Errorf("series labels not carried: %v", a.Labels)
			}
		}
	}
}

func sortStrings(s []string) []string {
	for i := range s {
		for j := i + 1; j < len(s); j++ {
			if s[j] < s[i] {
				s[i], s[j] = s[j], s[i]
			}
		}
	}
	return s
}

func TestRegoBadOutput(t *testing.T) {
	for _, tc := range []struct {
		body, want string
	}{
		{`alerts contains {"labels": {"span": "x"}} if true`, "no alertname label"},
		{`alerts contains {"labels": {"alertname": "X"}, "value": 3} if true`, `unknown key "value"`},
		{`alerts contains {"labels": {"alertname": "X", "n": {"a": 1}}} if true`, "values must be strings"},
		{`alerts contains "X" if true`, "want an object"},
		{`alerts := {"labels": 1}`, "alerts must be a set"},
	} {
		cfg, err := writePolicy(t, "package spanwatch\n\n"+tc.body+"\n", nil)
		if err != nil {
			t.Fatalf("%s: %v", tc.body, err)
		}
		_, err = cfg.Policies[0].Eval(context.Background(), Input(&snapshot.Snapshot{}))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: err = %v, want %q", tc.body, err, tc.want)
		}
	}
}

func TestRegoTimeout(t *testing.T) {
	// Counting to a large number through numbers.range and a comprehension
	// takes seconds; the deadline stops it.
	cfg, err := writePolicy(t, `package spanwatch

alerts contains {"labels": {"alertname": "Slow"}} if {
	n := count([x | some x in numbers.range(1, 100000000); x % 7 == 3])
	n > 0
}
`, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err = cfg.Policies[0].Eval(ctx, Input(&snapshot.Snapshot{}))
	if !errors.Is(err, ErrTimeout) {
		t.Fatalf("err = %v, want ErrTimeout", err)
	}
	if el := time.Since(start); el > 2*time.Second {
		t.Errorf("stopped after %v", el)
	}
}

func TestInputShape(t *testing.T) {
	cfg, err := writePolicy(t, `package spanwatch

alerts contains {"labels": {"alertname": "Shape", "span": s.span}, "annotations": {
	"summary": sprintf("%v %v %v %v %v %v %v %v", [s.count, s.p99_ns, s.labels.container, input.window_seconds, input.host, s.error_ratio, o.comm, o.user_stack[0]])
}} if {
	some s in input.series
	some o in input.overruns
	input.stats.ringbuf_drops == 3
}
`, nil)
	if err != nil {
		t.Fatal(err)
	}
	snap := &snapshot.Snapshot{
		Time: time.Unix(1700000000, 0), WindowNs: 5e9, Host: "node1",
		Series:   []snapshot.Series{{Span: "checkout", Identity: snapshot.Identity{Container: "web-1"}, Count: 12, P99Ns: 345, ErrorRatio: 0.25}},
		Overruns: []snapshot.Overrun{{Span: "checkout", Comm: "api", UserStack: []snapshot.Frame{{Function: "main.handle", File: "main.go", Line: 42}}}},
		Stats:    snapshot.Stats{RingbufDrops: 3},
	}
	got, err := cfg.Policies[0].Eval(context.Background(), Input(snap))
	if err != nil || len(got) != 1 {
		t.Fatalf("eval = %v, %v", got, err)
	}
	if want := "12 345 web-1 5 node1 0.25 api main.handle (main.go:42)"; got[0].Annotations["summary"] != want {
		t.Errorf("summary = %q, want %q", got[0].Annotations["summary"], want)
	}
}

// TestInputStats: input.stats holds every number of the snapshot's stats
// by its JSON name (snapshot.StatFields), zeros included.
func TestInputStats(t *testing.T) {
	cfg, err := writePolicy(t, `package spanwatch

alerts contains {"labels": {"alertname": "Stats"}, "annotations": {
	"summary": sprintf("%v %v %v %v %v %v", [count(input.stats), input.stats.series_live, input.stats.series_capacity, input.stats.read_errors, input.stats.overruns_queue_dropped, input.stats.names_full])
}} if {
	input.stats.ringbuf_drops == 0
}
`, nil)
	if err != nil {
		t.Fatal(err)
	}
	snap := &snapshot.Snapshot{Stats: snapshot.Stats{SeriesLive: 7, SeriesCapacity: 4096, ReadErrors: 2, OverrunsQueueDropped: 1}}
	got, err := cfg.Policies[0].Eval(context.Background(), Input(snap))
	if err != nil || len(got) != 1 {
		t.Fatalf("eval = %v, %v", got, err)
	}
	if want := fmt.Sprintf("%d 7 4096 2 1 0", len(snapshot.StatFields)); got[0].Annotations["summary"] != want {
		t.Errorf("summary = %q, want %q", got[0].Annotations["summary"], want)
	}
}

func TestInputBySpan(t *testing.T) {
	cfg, err := writePolicy(t, `package spanwatch

alerts contains {"labels": {"alertname": "Slow", "span": s.span, "container": s.container}} if {
	some s in input.by_span.checkout
	s.p99_ns > 1000
}
`, nil)
	if err != nil {
		t.Fatal(err)
	}
	snap := &snapshot.Snapshot{Series: []snapshot.Series{
		{Span: "checkout", Identity: snapshot.Identity{Container: "a"}, P99Ns: 2000},
		{Span: "search", Identity: snapshot.Identity{Container: "a"}, P99Ns: 9000},
		{Span: "checkout", Identity: snapshot.Identity{Container: "b"}, P99Ns: 500},
		{Span: "checkout", Identity: snapshot.Identity{Container: "c"}, P99Ns: 1001},
	}}
	got, err := cfg.Policies[0].Eval(context.Background(), Input(snap))
	if err != nil {
		t.Fatal(err)
	}
	var containers []string
	for _, a := range got {
		containers = append(containers, a.Labels["container"])
	}
	if strings.Join(sortStrings(containers), ",") != "a,c" {
		t.Errorf("fired for containers %v, want a and c", containers)
	}
}
