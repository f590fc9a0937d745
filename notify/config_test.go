package notify

import (
	"encoding/json"
	"os"
	"reflect"
	"sort"
	"strings"
	"testing"
	"time"

	"gopkg.in/yaml.v3"
)

func TestParseConfigFull(t *testing.T) {
	c := parseYAML(t, `
rules: []            # the policy package's; ignored here
webhooks:
  - name: ops
    url: https://alerts.example/hook
    format: template
    template: '{"text": {{ json .CommonAnnotations.summary }}}'
    content_type: application/json; charset=utf-8
    match: {severity: page}
    timeout: 5s
    send_resolved: false
    group_by: [alertname, span]
    group_wait: 10s
    group_interval: 1m
    repeat_interval: 1d
    max_alerts: 20
    max_age: 12h
    max_attempts: 100
    min_backoff: 1s
    max_backoff: 2m
    hmac_secret_file: /etc/spanwatch/hook.key
    basic_auth: {username: u, password_file: /etc/spanwatch/pw}
    tls: {ca_file: /etc/ca.pem, cert_file: /etc/c.pem, key_file: /etc/c.key, server_name: hooks, insecure_skip_verify: false}
  - name: am
    url: http://127.0.0.1:9093/api/v2/alerts
    format: alertmanager-api
routing:
  external_url: http://dash.example
  outbox: {path: /var/lib/spanwatch/o.db, max_entries: 500}
`)
	w := c.Webhooks[0]
	got := map[string]any{
		"name": w.Name, "url": w.URL, "format": w.Format, "ct": w.ContentType, "match": w.Match,
		"timeout": w.Timeout.D(), "send_resolved": w.SendResolved, "group_by": w.GroupBy,
		"group_wait": w.GroupWait.D(), "group_interval": w.GroupInterval.D(), "repeat": w.RepeatInterval.D(),
		"max_alerts": w.MaxAlerts, "max_age": w.MaxAge.D(), "max_attempts": w.MaxAttempts,
		"min_backoff": w.MinBackoff.D(), "max_backoff": w.MaxBackoff.D(), "hmac": w.HMACSecretFile,
		"basic": *w.BasicAuth, "tls": *w.TLS,
	}
	want := map[string]any{
		"name": "ops", "url": "https://alerts.example/hook", "format": FormatTemplate, "ct": "application/json; charset=utf-8",
		"match": map[string]string{"severity": "page"}, "timeout": 5 * time.Second, "send_resolved": false,
		"group_by": []string{"alertname", "span"}, "group_wait": 10 * time.Second, "group_interval": time.Minute,
		"repeat": 24 * time.Hour, "max_alerts": 20, "max_age": 12 * time.Hour, "max_attempts": 100,
		"min_backoff": time.Second, "max_backoff": 2 * time.Minute, "hmac": "/etc/spanwatch/hook.key",
		"basic": BasicAuth{Username: "u", PasswordFile: "/etc/spanwatch/pw"},
		"tls":   TLSConfig{CAFile: "/etc/ca.pem", CertFile: "/etc/c.pem", KeyFile: "/etc/c.key", ServerName: "hooks"},
	}
	for k, v := range want {
		g := got[k]
		// meta (positions) differs; compare the exported fields.
		if k == "basic" || k == "tls" {
			g, v = exported(g), exported(v)
		}
		if !reflect.DeepEqual(g, v) {
			t.Errorf("%s = %#v, want %#v", k, g, v)
		}
	}
	am := c.Webhooks[1]
	if am.Format != FormatAlertmanagerAPI || am.RepeatInterval.D() != DefaultAPIRepeatInterval || !am.SendResolved ||
		am.GroupWait.D() != DefaultGroupWait || am.Timeout.D() != DefaultTimeout || am.MaxAge.D() != DefaultMaxAge ||
		!reflect.DeepEqual(am.GroupBy, []string{"alertname"}) || am.ContentType != "application/json" {
		t.Errorf("defaults not applied: %+v", am)
	}
	if c.Routing.ExternalURL != "http://dash.example" || c.Routing.Outbox.Path != "/var/lib/spanwatch/o.db" || c.Routing.Outbox.MaxEntries != 500 {
		t.Errorf("routing = %+v", c.Routing)
	}
}

func exported(v any) map[string]any {
	out := map[string]any{}
	rv := reflect.ValueOf(v)
	for i := range rv.NumField() {
		if f := rv.Type().Field(i); f.IsExported() {
			out[f.Name] = rv.Field(i).Interface()
		}
	}
	return out
}

// TestParseConfigErrors checks that each mistake is reported at its
// file:line:col with a message that says what is wrong.
func TestParseConfigErrors(t *testing.T) {
	tests := []struct {
		name, yaml, want string
	}{
		{"unknown key", "webhooks:\n  - name: a\n    url: http://x\n    urll: http://y\n", `test.yaml:4:5: unknown key "urll"`},
		{"unknown nested key", "webhooks:\n  - name: a\n    url: http://x\n    tls: {ca: x}\n", `test.yaml:4:11: unknown key "ca"`},
		{"unknown routing key", "routing:\n  outbox: {size: 3}\n", `test.yaml:2:12: unknown key "size"`},
		{"wrong type duration", "webhooks:\n  - name: a\n    url: http://x\n    timeout: [1]\n", "test.yaml:4:14: expected a duration such as 10s, got a list"},
		{"bad duration", "webhooks:\n  - name: a\n    url: http://x\n    timeout: 10 seconds\n", `test.yaml:4:14: invalid duration "10 seconds"`},
		{"wrong type bool", "webhooks:\n  - name: a\n    url: http://x\n    send_resolved: yes please\n", `test.yaml:4:20: expected true or false, got string "yes please"`},
		{"wrong type int", "webhooks:\n  - name: a\n    url: http://x\n    max_alerts: many\n", `test.yaml:4:17: expected an integer, got string "many"`},
		{"wrong type list", "webhooks:\n  - name: a\n    url: http://x\n    group_by: alertname\n", `test.yaml:4:15: expected a list, got string "alertname"`},
		{"webhooks not a list", "webhooks: {name: a}\n", "test.yaml:1:11: expected a list, got a mapping"},
		{"duplicate key", "webhooks:\n  - name: a\n    url: http://x\n    url: http://y\n", `test.yaml:4:5: key "url" set twice`},
		{"missing url", "webhooks:\n  - name: a\n", `test.yaml:2:5: webhook "a" has no url`},
		{"bad scheme", "webhooks:\n  - name: a\n    url: ftp://x/\n", "test.yaml:3:5: webhook \"a\": url ftp://x/: scheme must be http or https"},
		{"secret not echoed", "webhooks:\n  - name: a\n    url: ftp://u:SECRET@x/?k=SECRET\n", "url ftp://xxxxx@x/?k=xxxxx"},
		{"unknown format", "webhooks:\n  - name: a\n    url: http://x\n    format: slack\n", `test.yaml:4:5: webhook "a": unknown format "slack"`},
		{"template missing", "webhooks:\n  - name: a\n    url: http://x\n    format: template\n", "test.yaml:4:5: webhook \"a\": format: template needs a template:"},
		{"template syntax", "webhooks:\n  - name: a\n    url: http://x\n    format: template\n    template: '{{ .Status '\n", "test.yaml:5:5: webhook \"a\": parse template"},
		{"template runaway", "webhooks:\n  - name: a\n    url: http://x\n    format: template\n    template: '{{ range 10000 }}{{ range 10000 }}xxxxxxxxxx{{ end }}{{ end }}'\n", "output longer than 1048576 bytes"},
		{"template spin", "webhooks:\n  - name: a\n    url: http://x\n    format: template\n    template: '{{ if true }}{{ range 99999999999 }}{{ end }}{{ end }}'\n", "range over 99999999999: at most 10000 iterations"},
		{"template field", "webhooks:\n  - name: a\n    url: http://x\n    format: template\n    template: '{{ .Nope }}'\n", "can't evaluate field Nope"},
		{"duplicate name", "webhooks:\n  - name: a\n    url: http://x\n  - name: a\n    url: http://y\n", `test.yaml:4:5: webhook name "a" used twice`},
		{"bad name", "webhooks:\n  - name: a b\n    url: http://x\n", `test.yaml:2:5: webhook name "a b"`},
		{"basic without password", "webhooks:\n  - name: a\n    url: http://x\n    basic_auth: {username: u}\n", `test.yaml:4:17: webhook "a": basic_auth needs a password_file`},
		{"bearer and basic", "webhooks:\n  - name: a\n    url: http://x\n    bearer_token_file: /t\n    basic_auth: {username: u, password_file: /p}\n", "test.yaml:5:5: webhook \"a\": set bearer_token_file or basic_auth, not both"},
		{"cert without key", "webhooks:\n  - name: a\n    url: http://x\n    tls: {cert_file: /c}\n", "test.yaml:4:11: webhook \"a\": tls: cert_file and key_file go together"},
		{"bad group_by", "webhooks:\n  - name: a\n    url: http://x\n    group_by: [alert-name]\n", `test.yaml:4:5: webhook "a": group_by: "alert-name" is not a label name`},
		{"backoff order", "webhooks:\n  - name: a\n    url: http://x\n    min_backoff: 10s\n    max_backoff: 1s\n", "test.yaml:5:5: webhook \"a\": max_backoff (1s) is below min_backoff (10s)"},
		{"zero interval", "webhooks:\n  - name: a\n    url: http://x\n    group_interval: 0s\n", "test.yaml:4:5: webhook \"a\": group_interval must be positive"},
		{"outbox size", "routing:\n  outbox: {max_entries: 0}\n", "test.yaml:2:12: outbox max_entries must be positive, got 0"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ParseConfigFile("test.yaml", []byte(tt.yaml))
			if err == nil {
				t.Fatalf("no error for:\n%s", tt.yaml)
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error %q\nwant it to contain %q", err, tt.want)
			}
			if strings.Contains(err.Error(), "SECRET") {
				t.Errorf("error %q echoes a secret", err)
			}
		})
	}
}

// TestSchemaCoversConfig checks that schema.json names exactly the keys the
// decoder accepts, so the two cannot drift apart.
func TestSchemaCoversConfig(t *testing.T) {
	data, err := os.ReadFile("schema.json")
	if err != nil {
		t.Fatal(err)
	}
	var schema map[string]any
	if err := json.Unmarshal(data, &schema); err != nil {
		t.Fatalf("schema.json: %v", err)
	}
	defs := schema["$defs"].(map[string]any)
	keys := func(def string) []string {
		props := defs[def].(map[string]any)["properties"].(map[string]any)
		var out []string
		for k := range props {
			out = append(out, k)
		}
		sort.Strings(out)
		return out
	}
	yamlKeys := func(v any) []string {
		var out []string
		rt := reflect.TypeOf(v)
		for i := range rt.NumField() {
			if tag, _, _ := strings.Cut(rt.Field(i).Tag.Get("yaml"), ","); tag != "" && tag != "-" {
				out = append(out, tag)
			}
		}
		sort.Strings(out)
		return out
	}
	for def, v := range map[string]any{"webhook": Webhook{}, "routing": Routing{}, "outbox": Outbox{}, "basic_auth": BasicAuth{}, "tls": TLSConfig{}} {
		if got, want := keys(def), yamlKeys(v); !reflect.DeepEqual(got, want) {
			t.Errorf("schema $defs.%s has keys %v, the decoder accepts %v", def, got, want)
		}
	}
}

// TestParseConfigAbsentSections checks that zero yaml.Nodes, as the policy
// package leaves for sections a file does not have, mean defaults.
func TestParseConfigAbsentSections(t *testing.T) {
	var webhooks, routing yaml.Node
	c, err := ParseConfig("rules.yaml", &webhooks, &routing)
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Webhooks) != 0 || c.Routing.Outbox.Path != DefaultOutboxPath || c.Routing.Outbox.MaxEntries != DefaultOutboxMaxEntries {
		t.Errorf("config from absent sections: %+v", c)
	}
}

// FuzzParseConfigFile checks that no input makes the decoder panic, and
// that every error it returns is located in the file.
func FuzzParseConfigFile(f *testing.F) {
	for _, s := range []string{
		"webhooks:\n  - name: a\n    url: http://x\n",
		"webhooks:\n  - {name: a, url: 'http://x', tls: {ca_file: c}, basic_auth: {username: u, password_file: p}}\n",
		"routing:\n  outbox: {path: /x, max_entries: 3}\n  external_url: http://y\n",
		"webhooks: &a [*a]\n",
		"webhooks:\n  - name: a\n    url: http://x\n    group_by: [\"...\"]\n    timeout: 1d\n",
		"webhooks:\n  - name: a\n    url: http://x\n    format: template\n    template: '{{ json .Alerts }}'\n",
		"webhooks: 3\nrouting: []\n",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, text string) {
		_, err := ParseConfigFile("fuzz.yaml", []byte(text))
		if err != nil && !strings.HasPrefix(err.Error(), "fuzz.yaml:") {
			t.Errorf("error without the file name: %v", err)
		}
	})
}

// TestAliasBomb checks that YAML aliases cannot make decoding explode.
func TestAliasBomb(t *testing.T) {
	var b strings.Builder
	b.WriteString("x: &w {name: a, url: 'http://x'}\nwebhooks: [")
	for range 5000 {
		b.WriteString("*w, ")
	}
	b.WriteString("*w]\n")
	_, err := ParseConfigFile("bomb.yaml", []byte(b.String()))
	if err == nil || !strings.Contains(err.Error(), "too many YAML aliases") {
		t.Errorf("err = %v, want too many aliases", err)
	}
}
