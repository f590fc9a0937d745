//go:build linux

package deploy

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// metricToken matches the identifiers of a PromQL expression; the ones
// that start with "spanwatch_" and hold no ':' (recording rules' names
// do) are spanwatch metrics.
var metricToken = regexp.MustCompile(`[a-zA-Z_:][a-zA-Z0-9_:]*`)

func metricNames(expr string) []string {
	var out []string
	for _, tok := range metricToken.FindAllString(expr, -1) {
		if strings.HasPrefix(tok, "spanwatch_") && !strings.Contains(tok, ":") {
			out = append(out, tok)
		}
	}
	return out
}

// dashboardExprs returns every PromQL expression in the dashboard: panel
// targets and template variable queries, with where each is.
func dashboardExprs(t *testing.T) map[string]string {
	t.Helper()
	b, err := os.ReadFile(dashboardPath)
	if err != nil {
		t.Fatal(err)
	}
	var d struct {
		UID    string `json:"uid"`
		Panels []struct {
			ID      int    `json:"id"`
			Title   string `json:"title"`
			Type    string `json:"type"`
			Targets []struct {
				RefID string `json:"refId"`
				Expr  string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
		Templating struct {
			List []struct {
				Name  string          `json:"name"`
				Query json.RawMessage `json:"query"`
			} `json:"list"`
		} `json:"templating"`
	}
	dec := json.NewDecoder(strings.NewReader(string(b)))
	if err := dec.Decode(&d); err != nil {
		t.Fatalf("%s: %v", dashboardPath, err)
	}
	if d.UID == "" {
		t.Errorf("%s: no uid", dashboardPath)
	}
	out := map[string]string{}
	ids := map[int]bool{}
	for _, p := range d.Panels {
		if ids[p.ID] {
			t.Errorf("%s: panel id %d used twice", dashboardPath, p.ID)
		}
		ids[p.ID] = true
		if p.Type != "row" && len(p.Targets) == 0 {
			t.Errorf("%s: panel %q has no query", dashboardPath, p.Title)
		}
		refs := map[string]bool{}
		for _, tg := range p.Targets {
			if refs[tg.RefID] || tg.Expr == "" {
				t.Errorf("%s: panel %q: target %q is empty or its refId repeats", dashboardPath, p.Title, tg.RefID)
			}
			refs[tg.RefID] = true
			out[fmt.Sprintf("panel %q target %s", p.Title, tg.RefID)] = tg.Expr
		}
	}
	for _, v := range d.Templating.List {
		var q struct {
			Query string `json:"query"`
		}
		if json.Unmarshal(v.Query, &q) == nil && q.Query != "" {
			out["variable "+v.Name] = q.Query
		}
	}
	return out
}

// exists reports whether the metric name a query uses is served: a family
// of that name, or a histogram's _bucket, _sum or _count series.
func exists(families map[string]*dto.MetricFamily, name string) bool {
	if _, ok := families[name]; ok {
		return true
	}
	for _, suffix := range []string{"_bucket", "_sum", "_count"} {
		if base, ok := strings.CutSuffix(name, suffix); ok {
			if mf := families[base]; mf != nil && mf.GetType() == dto.MetricType_HISTOGRAM {
				return true
			}
		}
	}
	return false
}

// TestDashboardAndRulesMetricsExist runs a real agent (spanwatch run, with
// the go-http example as its traced service and a span over budget),
// scrapes its /metrics, and checks that every spanwatch metric the Grafana
// dashboard and the Prometheus rules query is one the agent serves.
func TestDashboardAndRulesMetricsExist(t *testing.T) {
	exprs := dashboardExprs(t)
	rules := recordingRules(t)
	for name, expr := range rules {
		exprs["rule "+name] = expr
	}
	if os.Geteuid() != 0 {
		t.Skip("needs root to run the agent (BPF); the dashboard parsed")
	}
	bin := spanwatchBinary(t)
	dir := t.TempDir()
	example := filepath.Join(dir, "go-http")
	if out, err := exec.Command("go", "build", "-o", example, "../examples/go-http").CombinedOutput(); err != nil {
		t.Fatalf("build examples/go-http: %v\n%s", err, out)
	}
	// A webhook, so that the notifier's metrics (which the delivery
	// alerts query) are served too.
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.Copy(io.Discard, r.Body) }))
	defer hook.Close()
	config := filepath.Join(dir, "rules.yaml")
	if err := os.WriteFile(config, []byte("budgets:\n  - span: payment.charge\n    budget: 100ms\nrules:\n  - {name: Slow, span: checkout, when: p99 > 10s}\n"+
		"webhooks:\n  - {name: ops, url: \""+hook.URL+"\"}\nrouting:\n  outbox: {path: "+filepath.Join(dir, "outbox.db")+"}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	svc := exec.Command(example, "-listen", "127.0.0.1:0")
	svc.Env = append(os.Environ(), "SPANWATCH_EMIT=marker")
	svcErr, _ := svc.StderrPipe()
	if err := svc.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { svc.Process.Kill(); svc.Wait() }()
	url := ""
	sc := bufio.NewScanner(svcErr)
	for url == "" && sc.Scan() {
		if m := regexp.MustCompile(`serving on (http://\S+)`).FindStringSubmatch(sc.Text()); m != nil {
			url = m[1]
		}
	}
	if url == "" {
		t.Fatal("go-http did not start")
	}
	go io.Copy(io.Discard, svcErr)

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	agent := exec.CommandContext(ctx, bin, "run", "--config", config, "--interval", "1s", "--metrics-addr", addr, "--source", "marker", "--binary", example)
	agent.Cancel = func() error { return agent.Process.Signal(os.Interrupt) }
	var logs bytes.Buffer
	agent.Stderr = &logs // read only after Wait
	if err := agent.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		cancel()
		agent.Wait()
		if t.Failed() {
			t.Logf("spanwatch run's log:\n%s", logs.String())
		}
	}()

	// Traffic until the span metrics are there, budget and all.
	deadline := time.Now().Add(30 * time.Second)
	var families map[string]*dto.MetricFamily
	for {
		resp, err := http.Get(url + "/checkout")
		if err == nil {
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
		if families, err = scrapeText("http://" + addr + "/metrics"); err == nil &&
			families["spanwatch_span_budget_seconds"] != nil && families["spanwatch_span_duration_seconds"] != nil &&
			families["spanwatch_snapshot_read_duration_seconds"] != nil && families["spanwatch_notify_attempts_total"] != nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no span metrics on the agent's /metrics after 30s (last error %v)", err)
		}
		time.Sleep(200 * time.Millisecond)
	}

	where := make([]string, 0, len(exprs))
	for w := range exprs {
		where = append(where, w)
	}
	sort.Strings(where)
	used := map[string]bool{}
	for _, w := range where {
		names := metricNames(exprs[w])
		// A panel may query a shipped recording rule (whose own metrics
		// are checked as "rule NAME") or Prometheus's up.
		recorded := 0
		for _, tok := range metricToken.FindAllString(exprs[w], -1) {
			if strings.Count(tok, ":") == 2 && strings.HasPrefix(tok[strings.Index(tok, ":")+1:], "spanwatch_") {
				if _, ok := rules[tok]; !ok {
					t.Errorf("%s: %s is not a shipped recording rule", w, tok)
				}
				recorded++
			} else if tok == "up" {
				recorded++
			}
		}
		if len(names) == 0 && recorded == 0 && !strings.HasPrefix(w, "rule ") {
			t.Errorf("%s: queries no spanwatch metric: %s", w, exprs[w])
		}
		for _, n := range names {
			used[n] = true
			if !exists(families, n) {
				t.Errorf("%s: %s is not on the agent's /metrics", w, n)
			}
		}
	}
	// And the dashboard shows the agent's own drop counters, all of them.
	for name := range families {
		if strings.HasSuffix(name, "drops_total") || strings.HasSuffix(name, "dropped_total") || strings.HasSuffix(name, "full_total") {
			if !used[name] {
				t.Errorf("%s (the agent losing data) is on /metrics but on no dashboard panel or rule", name)
			}
		}
	}
	names := slices.Sorted(func(yield func(string) bool) {
		for n := range used {
			if !yield(n) {
				return
			}
		}
	})
	t.Logf("%d metrics queried, all served: %s", len(names), strings.Join(names, " "))
}

func scrapeText(url string) (map[string]*dto.MetricFamily, error) {
	resp, err := http.Get(url)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		return nil, fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	return p.TextToMetricFamilies(resp.Body)
}
