package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"testing"

	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/spanwatch/spanwatch/notify"
	"github.com/spanwatch/spanwatch/policy"
)

// TestSpans checks the spans the service produces, as OpenTelemetry sees
// them, and that rules.yaml's budgets cover their names.
func TestSpans(t *testing.T) {
	sr := tracetest.NewSpanRecorder()
	tp := newTracerProvider(sdktrace.WithSpanProcessor(sr))
	defer tp.Shutdown(context.Background())
	srv := httptest.NewServer(newHandler(tp))
	defer srv.Close()
	queries.Store(0)
	orders.Store(0)
	var failed int
	for i := range 10 {
		resp, err := http.Get(fmt.Sprintf("%s/orders/%d", srv.URL, i))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode == 500 {
			failed++
		}
		if len(resp.Header.Get("X-Trace-Id")) != 32 {
			t.Errorf("X-Trace-Id %q", resp.Header.Get("X-Trace-Id"))
		}
	}
	if failed != 1 {
		t.Errorf("%d of 10 orders failed, want 1", failed)
	}
	cfg, err := policy.LoadFile("rules.yaml")
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile("rules.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := notify.ParseConfigFile("rules.yaml", data); err != nil {
		t.Fatal(err)
	}
	names := map[string]int{}
	errs := 0
	for _, s := range sr.Ended() {
		names[s.Name()]++
		if s.Status().Code == codes.Error {
			errs++
		}
		if _, ok := cfg.BudgetFor(s.Name()); !ok {
			t.Errorf("span %q has no budget in rules.yaml", s.Name())
		}
	}
	if names["GET /orders/{id}"] != 10 || names["db.query"] != 10 {
		t.Errorf("spans %v, want 10 GET /orders/{id} and 10 db.query", names)
	}
	if errs != 2 {
		t.Errorf("%d error spans, want 2 (the failed order's server span and query)", errs)
	}
}

func buildExample(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "otel-example")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

func startExample(t *testing.T, bin string, env ...string) string {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	cmd := exec.CommandContext(ctx, bin, "-listen", "127.0.0.1:0")
	cmd.Env = append(os.Environ(), env...)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cancel(); cmd.Wait() })
	sc := bufio.NewScanner(stderr)
	re := regexp.MustCompile(`serving on (http://\S+)`)
	for sc.Scan() {
		if m := re.FindStringSubmatch(sc.Text()); m != nil {
			go io.Copy(io.Discard, stderr)
			return m[1]
		}
	}
	t.Fatalf("the example exited without serving: %v", sc.Err())
	return ""
}

func TestBuildsAndServes(t *testing.T) {
	bin := buildExample(t)
	url := startExample(t, bin)
	out, err := exec.Command(bin, "-load", "500ms", "-rate", "100", "-target", url).CombinedOutput()
	if err != nil {
		t.Fatalf("-load: %v\n%s", err, out)
	}
	var sent, failed int
	if _, err := fmt.Sscanf(string(out), "sent %d requests, %d answered 5xx", &sent, &failed); err != nil || sent < 10 || failed == 0 {
		t.Fatalf("-load printed %q", out)
	}
}
