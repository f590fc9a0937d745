package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"

	"github.com/spanwatch/spanwatch/config"
	"github.com/spanwatch/spanwatch/notify"
	"github.com/spanwatch/spanwatch/policy"
)

const (
	root = "../../.."
	page = root + "/docs/configuration.md"
)

func readPage(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile(page)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestPageIsGenerated fails when docs/configuration.md is not what the
// generator writes from the schemas and the template: a schema or the
// template changed without go generate ./config, or the page was edited
// by hand.
func TestPageIsGenerated(t *testing.T) {
	want, err := render(root)
	if err != nil {
		t.Fatal(err)
	}
	if got := readPage(t); got != string(want) {
		gl, wl := strings.Split(got, "\n"), strings.Split(string(want), "\n")
		for i := 0; i < len(gl) || i < len(wl); i++ {
			var g, w string
			if i < len(gl) {
				g = gl[i]
			}
			if i < len(wl) {
				w = wl[i]
			}
			if g != w {
				t.Fatalf("docs/configuration.md is stale (run go generate ./config); line %d is\n%s\nthe generator writes\n%s", i+1, g, w)
			}
		}
	}
}

// TestRenderRefuses checks that the generator refuses a page that leaves
// out a section, and a schema key without a description.
func TestRenderRefuses(t *testing.T) {
	dir := t.TempDir()
	copyFile := func(rel string, edit func(string) string) {
		t.Helper()
		b, err := os.ReadFile(filepath.Join(root, rel))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.MkdirAll(filepath.Join(dir, filepath.Dir(rel)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, rel), []byte(edit(string(b))), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	same := func(s string) string { return s }
	for _, f := range []string{notifySchema, usdtSchema, tpsourceSchema, pageTemplate} {
		copyFile(f, same)
	}
	if _, err := render(dir); err != nil {
		t.Fatalf("the copy does not render: %v", err)
	}
	copyFile(pageTemplate, func(s string) string { return strings.Replace(s, "<!-- keys: metrics -->\n", "", 1) })
	if _, err := render(dir); err == nil || !strings.Contains(err.Error(), `section "metrics" is not placed`) {
		t.Errorf("a page without metrics: renders (%v)", err)
	}
	copyFile(pageTemplate, same)
	copyFile(notifySchema, func(s string) string {
		return regexp.MustCompile(`("server_name": \{"type": "string"), "description": "[^"]*"`).ReplaceAllString(s, "$1")
	})
	if _, err := render(dir); err == nil || !strings.Contains(err.Error(), "tls.server_name: no description") {
		t.Errorf("a key without a description: renders (%v)", err)
	}
}

// yamlBlocks are the page's ```yaml examples.
func yamlBlocks(doc string) []string {
	var out []string
	for _, m := range regexp.MustCompile("(?s)\n```yaml\n(.*?)\n```\n").FindAllStringSubmatch(doc, -1) {
		out = append(out, m[1]+"\n")
	}
	return out
}

// TestExamplesLoad loads every example of the page with config.Load, as
// spanwatch check and run do. An example with webhooks and no routing:
// gets an outbox in the test's directory (the default,
// /var/lib/spanwatch/outbox.db, needs its directory writable).
func TestExamplesLoad(t *testing.T) {
	blocks := yamlBlocks(readPage(t))
	if len(blocks) < 3 {
		t.Fatalf("%d yaml examples on the page; want the short file, Slack and PagerDuty", len(blocks))
	}
	for i, b := range blocks {
		cfg := loadExample(t, b)
		if cfg == nil {
			t.Errorf("example %d does not load:\n%s", i+1, b)
		} else if w := cfg.Warnings(); len(w) > 0 {
			t.Errorf("example %d: spanwatch check warns: %v", i+1, w)
		}
	}
}

func loadExample(t *testing.T, text string) *config.Config {
	t.Helper()
	dir := t.TempDir()
	var top map[string]any
	if err := yaml.Unmarshal([]byte(text), &top); err != nil {
		t.Errorf("%v", err)
		return nil
	}
	if _, ok := top["webhooks"]; ok {
		if _, ok := top["routing"]; !ok {
			text += "routing:\n  outbox:\n    path: " + filepath.Join(dir, "outbox.db") + "\n"
		}
	}
	path := filepath.Join(dir, "spanwatch.yaml")
	if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Load(path, config.LoadOptions{Collector: config.CollectorSettings{Interval: config.DefaultInterval}})
	if err != nil {
		t.Errorf("%v", err)
		return nil
	}
	return cfg
}

// send renders the webhook named name of an example for a sample alert,
// posting it to a local server, and returns the body.
func send(t *testing.T, example, name string) map[string]any {
	t.Helper()
	var got []byte
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got, _ = io.ReadAll(r.Body)
		w.WriteHeader(http.StatusAccepted)
	}))
	defer srv.Close()
	cfg := loadExample(t, example)
	if cfg == nil || cfg.Notify == nil {
		t.Fatalf("the example does not load")
	}
	for i := range cfg.Notify.Webhooks {
		cfg.Notify.Webhooks[i].URL = srv.URL
	}
	if _, resp, err := notify.SendTest(context.Background(), cfg.Notify, name); err != nil || resp.Err != nil {
		t.Fatalf("send: %v %v", err, resp.Err)
	}
	var body map[string]any
	if err := json.Unmarshal(got, &body); err != nil {
		t.Fatalf("%s's body is not JSON: %v\n%s", name, err, got)
	}
	return body
}

// TestWebhookExamples renders the Slack and PagerDuty examples over a
// sample alert and checks the bodies have what those APIs require.
func TestWebhookExamples(t *testing.T) {
	var slack, pd string
	for _, b := range yamlBlocks(readPage(t)) {
		switch {
		case strings.Contains(b, "name: slack-ops"):
			slack = b
		case strings.Contains(b, "name: pagerduty"):
			pd = b
		}
	}
	if slack == "" || pd == "" {
		t.Fatal("the page has no Slack or no PagerDuty example")
	}
	s := send(t, slack, "slack-ops")
	if text, _ := s["text"].(string); !strings.Contains(text, "FIRING") {
		t.Errorf("Slack body's text %q", text)
	}
	if a, _ := s["attachments"].([]any); len(a) != 1 {
		t.Errorf("Slack body's attachments: %v", s["attachments"])
	}
	p := send(t, pd, "pagerduty")
	if k, _ := p["routing_key"].(string); len(k) != 32 {
		t.Errorf("PagerDuty routing_key %q: want 32 characters", k)
	}
	if p["event_action"] != "trigger" {
		t.Errorf("PagerDuty event_action %v for a firing alert", p["event_action"])
	}
	if k, _ := p["dedup_key"].(string); k == "" {
		t.Errorf("PagerDuty dedup_key is empty")
	}
	payload, _ := p["payload"].(map[string]any)
	for _, k := range []string{"summary", "source", "severity"} {
		if v, _ := payload[k].(string); v == "" {
			t.Errorf("PagerDuty payload.%s is empty: %v", k, payload)
		}
	}
	switch payload["severity"] {
	case "critical", "error", "warning", "info":
	default:
		t.Errorf("PagerDuty payload.severity %v: not one PagerDuty takes", payload["severity"])
	}
}

// TestTemplatesDocumented checks that the page names every field of the
// data templates execute over, and that every function it lists is
// defined.
func TestTemplatesDocumented(t *testing.T) {
	doc := readPage(t)
	for _, v := range []any{policy.TemplateData{}, notify.Message{}, notify.PayloadAlert{}} {
		typ := reflect.TypeOf(v)
		for i := range typ.NumField() {
			if f := typ.Field(i); f.IsExported() && !strings.Contains(doc, "`."+f.Name+"`") {
				t.Errorf("%s.%s is not on the page", typ, f.Name)
			}
		}
	}
	sections := strings.Split(doc, "### Webhook bodies")
	if len(sections) != 2 {
		t.Fatal("no Webhook bodies section")
	}
	funcs := func(s string) []string {
		var out []string
		for _, row := range regexp.MustCompile("(?m)^\\| (`[a-zA-Z]+`(?:, `[a-zA-Z]+`)*) \\|").FindAllStringSubmatch(s, -1) {
			for _, f := range strings.Split(row[1], ", ") {
				out = append(out, strings.Trim(f, "`"))
			}
		}
		return out
	}
	labelFuncs := funcs(sections[0][strings.Index(sections[0], "| Function |"):])
	if len(labelFuncs) == 0 {
		t.Fatal("no functions listed for labels")
	}
	for _, f := range labelFuncs {
		if _, err := policy.CompileTemplate("t", "{{ if false }}{{ "+f+" }}{{ end }}"); err != nil {
			t.Errorf("labels' function %s: %v", f, err)
		}
	}
	hookFuncs := funcs(sections[1][strings.Index(sections[1], "| Function |"):strings.Index(sections[1], "## Webhook examples")])
	if len(hookFuncs) == 0 {
		t.Fatal("no functions listed for webhooks")
	}
	var b bytes.Buffer
	b.WriteString("webhooks:\n  - name: t\n    url: http://example.com/\n    format: template\n    template: '")
	for _, f := range hookFuncs {
		b.WriteString("{{ if false }}{{ " + f + " }}{{ end }}")
	}
	b.WriteString("'\n")
	if loadExample(t, b.String()) == nil {
		t.Errorf("webhook functions %v: not all defined", hookFuncs)
	}
}
