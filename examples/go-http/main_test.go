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
	"time"

	"github.com/spanwatch/spanwatch/notify"
	"github.com/spanwatch/spanwatch/policy"
)

func TestRoutes(t *testing.T) {
	srv := httptest.NewServer(newMux())
	defer srv.Close()
	get := func(path string) int {
		resp, err := http.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode
	}
	searches.Store(0)
	var failed int
	for range 40 {
		if get("/search") == http.StatusServiceUnavailable {
			failed++
		}
	}
	if failed != 2 {
		t.Errorf("%d of 40 searches failed, want 2", failed)
	}
	if code := get("/checkout"); code != 200 {
		t.Errorf("/checkout: %d", code)
	}
	if code := get("/nope"); code != 404 {
		t.Errorf("/nope: %d", code)
	}
}

// TestRulesFile parses rules.yaml with spanwatch's own parsers and checks
// that the example's slow path is in fact over the checkout budget.
func TestRulesFile(t *testing.T) {
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
	for _, span := range []string{"checkout", "payment.charge"} {
		b, ok := cfg.BudgetFor(span)
		if !ok || b >= 300*time.Millisecond {
			t.Fatalf("%s budget %v (set %v): the 300 ms slow charge must exceed it", span, b, ok)
		}
	}
	if len(cfg.Rules) != 2 {
		t.Fatalf("%d rules, want 2", len(cfg.Rules))
	}
}

// buildExample builds this example into a temporary directory.
func buildExample(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "go-http")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

// startExample runs the built example on a free port and returns its URL.
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

// TestBuildsAndServes builds the example and runs it as its users would,
// including its own load generator.
func TestBuildsAndServes(t *testing.T) {
	bin := buildExample(t)
	url := startExample(t, bin)
	out, err := exec.Command(bin, "-load", "500ms", "-rate", "100", "-target", url).CombinedOutput()
	if err != nil {
		t.Fatalf("-load: %v\n%s", err, out)
	}
	var sent, failed int
	if _, err := fmt.Sscanf(string(out), "sent %d requests, %d answered 5xx", &sent, &failed); err != nil || sent < 10 {
		t.Fatalf("-load printed %q", out)
	}
}
