package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/spanwatch/spanwatch/alert"
	"github.com/spanwatch/spanwatch/notify"
)

func TestNotifyTest(t *testing.T) {
	dir := t.TempDir()
	key := filepath.Join(dir, "hook.key")
	os.WriteFile(key, []byte("k3y\n"), 0o600)
	var got notify.Message
	var verifyErr error
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		verifyErr = notify.Verify([]byte("k3y"), r.Header, body, time.Now(), time.Minute)
		json.Unmarshal(body, &got)
		switch r.URL.Path {
		case "/ok":
			io.WriteString(w, `{"status": "received"}`)
		case "/bad":
			http.Error(w, "missing field team", http.StatusBadRequest)
		default:
			http.Error(w, "overloaded", http.StatusServiceUnavailable)
		}
	}))
	defer srv.Close()
	cfg := filepath.Join(dir, "spanwatch.yaml")
	os.WriteFile(cfg, []byte(`
rules: []
webhooks:
  - {name: ok, url: `+srv.URL+`/ok, hmac_secret_file: `+key+`}
  - {name: bad, url: `+srv.URL+`/bad}
  - {name: busy, url: `+srv.URL+`/busy}
`), 0o600)
	tests := []struct {
		webhook string
		wantErr string
		wantOut []string
	}{
		{"ok", "", []string{"webhook ok: POST " + srv.URL + "/ok (format alertmanager, signed, timeout 10s)", "receiver answered 200", `body: {"status": "received"}`}},
		{"bad", "receiver refused the alert (http_4xx; permanent failure", []string{"receiver answered 400", "body: missing field team"}},
		{"busy", "receiver refused the alert (http_5xx; the agent would retry it)", []string{"receiver answered 503", "body: overloaded"}},
		{"nope", `has no webhook named "nope" (it has: ok, bad, busy)`, nil},
	}
	for _, tt := range tests {
		t.Run(tt.webhook, func(t *testing.T) {
			var out bytes.Buffer
			err := notifyTest(context.Background(), &out, cfg, tt.webhook, 0, false)
			if (err == nil) != (tt.wantErr == "") || (err != nil && !strings.Contains(err.Error(), tt.wantErr)) {
				t.Errorf("error %v, want %q", err, tt.wantErr)
			}
			for _, w := range tt.wantOut {
				if !strings.Contains(out.String(), w) {
					t.Errorf("output lacks %q:\n%s", w, out.String())
				}
			}
		})
	}
	notifyTest(context.Background(), io.Discard, cfg, "ok", 0, false)
	if verifyErr != nil {
		t.Errorf("the receiver could not verify the signature: %v", verifyErr)
	}
	if len(got.Alerts) != 1 || got.Alerts[0].Labels["alertname"] != "SpanwatchTest" || got.Alerts[0].Annotations["trace_id"] == "" || got.Version != "4" {
		t.Errorf("sample payload: %+v", got)
	}
	// Exit statuses through the command registry.
	for args, want := range map[string]int{
		"notify test --config " + cfg + " --webhook ok":  0,
		"notify test --config " + cfg + " --webhook bad": 1,
		"notify test --webhook ok":                       2,
		"notify check":                                   2,
	} {
		if code := run(strings.Fields(args), io.Discard, io.Discard); code != want {
			t.Errorf("spanwatch %s: exit %d, want %d", args, code, want)
		}
	}
}

// TestNotifyDeadLetters has a receiver refuse an alert, then lists the
// outbox's dead letters from the command line once the dispatcher closed.
func TestNotifyDeadLetters(t *testing.T) {
	dir := t.TempDir()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "unknown tenant", http.StatusForbidden)
	}))
	defer srv.Close()
	cfgPath := filepath.Join(dir, "spanwatch.yaml")
	os.WriteFile(cfgPath, []byte("webhooks:\n  - {name: ops, url: "+srv.URL+", group_wait: 0s}\nrouting:\n  outbox: {path: "+filepath.Join(dir, "outbox.db")+"}\n"), 0o600)
	data, _ := os.ReadFile(cfgPath)
	cfg, err := notify.ParseConfigFile(cfgPath, data)
	if err != nil {
		t.Fatal(err)
	}
	d, err := notify.New(cfg, notify.Options{})
	if err != nil {
		t.Fatal(err)
	}
	labels := map[string]string{"alertname": "Slow", "span": "checkout"}
	if _, err := d.Notify(context.Background(), &alert.Alert{Labels: labels, State: alert.StateFiring, StartsAt: time.Now(), Fingerprint: alert.Fingerprint(labels)}); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if l, _ := d.DeadLetters(); len(l) == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no dead letter")
		}
	}
	var busy bytes.Buffer
	if err := printDeadLetters(&busy, cfgPath); !errors.Is(err, notify.ErrOutboxInUse) {
		t.Errorf("while the outbox is held: %v", err)
	}
	d.Close()
	var out bytes.Buffer
	if err := printDeadLetters(&out, cfgPath); err != nil {
		t.Fatal(err)
	}
	var dl notify.DeadLetter
	if err := json.Unmarshal(out.Bytes(), &dl); err != nil || dl.Webhook != "ops" || dl.Reason != notify.ReasonHTTP4xx || !strings.Contains(dl.Error, "unknown tenant") {
		t.Errorf("printed %q (%v)", out.String(), err)
	}
	if code := run([]string{"notify", "dead-letters"}, io.Discard, io.Discard); code != 2 {
		t.Errorf("dead-letters without --config: exit %d", code)
	}
}
