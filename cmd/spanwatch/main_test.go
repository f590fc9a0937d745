package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestHelp checks that every command answers --help with its usage and
// exits 0, and that an unknown command exits 2.
func TestHelp(t *testing.T) {
	if len(commands) < 3 {
		t.Fatalf("only %d commands registered", len(commands))
	}
	for name, c := range commands {
		var out, errb bytes.Buffer
		if code := run([]string{name, "--help"}, &out, &errb); code != 0 {
			t.Errorf("%s --help: exit %d", name, code)
		}
		if !strings.Contains(errb.String(), "Usage: spanwatch "+name) || !strings.Contains(errb.String(), c.summary) {
			t.Errorf("%s --help printed %q", name, errb.String())
		}
	}
	var out, errb bytes.Buffer
	if code := run([]string{"frobnicate"}, &out, &errb); code != 2 || !strings.Contains(errb.String(), `unknown command "frobnicate"`) {
		t.Errorf("unknown command: exit %d, %q", code, errb.String())
	}
	out.Reset()
	if code := run([]string{"help"}, &out, &errb); code != 0 || !strings.Contains(out.String(), "Commands:") {
		t.Errorf("help: exit %d, %q", code, out.String())
	}
}

func TestRunNeedsConfig(t *testing.T) {
	if _, ok := commands["run"]; !ok {
		t.Skip("run is Linux-only")
	}
	var out, errb bytes.Buffer
	if code := run([]string{"run"}, &out, &errb); code != 2 || !strings.Contains(errb.String(), "--config FILE is required") {
		t.Errorf("run without --config: exit %d, %q", code, errb.String())
	}
	bad := filepath.Join(t.TempDir(), "bad.yaml")
	os.WriteFile(bad, []byte("rules:\n  - name: X\n    when: p99 >> 3\n"), 0o644)
	errb.Reset()
	if code := run([]string{"run", "--config", bad}, &out, &errb); code != 1 || !strings.Contains(errb.String(), "bad.yaml:") {
		t.Errorf("run with a bad file: exit %d, %q", code, errb.String())
	}
}

func requireRoot(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root (CAP_BPF, CAP_PERFMON) to load BPF")
	}
}

// buildSpanwatch builds the binary once per test run.
func buildSpanwatch(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "spanwatch")
	cmd := exec.Command("go", "build", "-o", bin, ".")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

// TestDemo runs the built binary's demo: spans flow through the kernel into
// the table, a slow checkout raises SpanOverBudget with the stack of the
// function that ran it, and the rules fire.
func TestDemo(t *testing.T) {
	requireRoot(t)
	bin := buildSpanwatch(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, bin, "demo", "--duration", "5s").CombinedOutput()
	if err != nil {
		t.Fatalf("demo: %v\n%s", err, out)
	}
	s := string(out)
	for _, want := range []string{
		"demo.checkout", "demo.db.query", "demo.cache.get", "P99",
		"ALERT SpanOverBudget [firing]", "main.demoCheckout",
		"ALERT QueryErrors [firing]",
		"demo done:",
	} {
		if !strings.Contains(s, want) {
			t.Errorf("demo output lacks %q:\n%s", want, s)
		}
	}
}

// TestTop renders two refreshes of top as plain text.
func TestTop(t *testing.T) {
	requireRoot(t)
	bin := buildSpanwatch(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "top", "-n", "2", "--interval", "500ms")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("top: %v\n%s", err, out)
	}
	if n := strings.Count(string(out), "spanwatch top —"); n != 2 {
		t.Errorf("top printed %d screens, want 2:\n%s", n, out)
	}
	if !strings.Contains(string(out), "SPAN") || strings.Contains(string(out), "\033[") {
		t.Errorf("top -n output is not a plain table:\n%s", out)
	}
}

// TestDemoDeliversToWebhook runs the demo workload against a rule file with
// a webhook: a slow checkout's alert arrives at an HTTP receiver as an
// Alertmanager payload, with the stack of the function that ran slow.
func TestDemoDeliversToWebhook(t *testing.T) {
	requireRoot(t)
	bin := buildSpanwatch(t)
	var mu sync.Mutex
	var bodies []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		bodies = append(bodies, string(b))
		mu.Unlock()
	}))
	defer srv.Close()
	dir := t.TempDir()
	cfg := filepath.Join(dir, "rules.yaml")
	os.WriteFile(cfg, []byte(`
budgets:
  - span: demo.checkout
    budget: 100ms
webhooks:
  - name: test
    url: `+srv.URL+`
    format: alertmanager
    group_by: [alertname, span]
    group_wait: 100ms
routing:
  outbox: {path: `+filepath.Join(dir, "outbox.db")+`}
collector:
  interval: 500ms
`), 0o644)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, bin, "demo", "--config", cfg, "--duration", "6s").CombinedOutput()
	if err != nil {
		t.Fatalf("demo: %v\n%s", err, out)
	}
	mu.Lock()
	defer mu.Unlock()
	var found bool
	for _, b := range bodies {
		var m struct {
			Version string
			Alerts  []struct {
				Labels      map[string]string
				Annotations map[string]string
			}
		}
		if err := json.Unmarshal([]byte(b), &m); err != nil {
			t.Fatalf("payload is not JSON: %v\n%s", err, b)
		}
		for _, a := range m.Alerts {
			if m.Version == "4" && a.Labels["alertname"] == "SpanOverBudget" && a.Labels["span"] == "demo.checkout" &&
				strings.Contains(a.Annotations["stack"], "main.demoCheckout") {
				found = true
			}
		}
	}
	if !found {
		t.Fatalf("no SpanOverBudget alert with the stack arrived; %d payloads:\n%s\ndemo output:\n%s", len(bodies), strings.Join(bodies, "\n"), out)
	}
}

func TestParseInterspersed(t *testing.T) {
	for _, tc := range []struct {
		args   []string
		pos    []string
		filter string
		json   bool
	}{
		{[]string{"a", "--filter", "x", "b"}, []string{"a", "b"}, "x", false},
		{[]string{"--json", "a", "--filter=x"}, []string{"a"}, "x", true},
		{[]string{"a", "--json", "b", "--filter", "x"}, []string{"a", "b"}, "x", true},
		{[]string{"a", "--", "--filter", "x"}, []string{"a", "--filter", "x"}, "", false},
		{[]string{"--filter", "--", "a", "--json"}, []string{"a"}, "--", true},
		{[]string{"--json", "--", "-", "--json"}, []string{"-", "--json"}, "", true},
		{[]string{"-", "--json"}, []string{"-"}, "", true},
		{nil, nil, "", false},
	} {
		fs := flag.NewFlagSet("t", flag.ContinueOnError)
		filter := fs.String("filter", "", "")
		asJSON := fs.Bool("json", false, "")
		pos, err := parseInterspersed(fs, tc.args)
		if err != nil {
			t.Errorf("%q: %v", tc.args, err)
			continue
		}
		if !slices.Equal(pos, tc.pos) || *filter != tc.filter || *asJSON != tc.json {
			t.Errorf("%q: positional %q filter %q json %v, want %q %q %v", tc.args, pos, *filter, *asJSON, tc.pos, tc.filter, tc.json)
		}
	}
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	if _, err := parseInterspersed(fs, []string{"a", "--nope"}); err == nil {
		t.Error("an unknown flag after a positional argument was accepted")
	}
}
