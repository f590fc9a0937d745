//go:build linux

package agent

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/spanwatch/spanwatch/alert"
	"github.com/spanwatch/spanwatch/config"
	"github.com/spanwatch/spanwatch/notify"
	"github.com/spanwatch/spanwatch/snapshot"
)

// syncBuffer is a log destination tests read while the agent writes.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func testLogger(buf *syncBuffer) *slog.Logger {
	return slog.New(slog.NewTextHandler(buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// TestListenerBind checks that a port in use stops the agent at New, and
// that an address reaching beyond loopback is logged as such, one on
// loopback is not.
func TestListenerBind(t *testing.T) {
	cfg, err := config.Parse("rules.yaml", []byte("rules: []\n"), config.LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	if _, err := New(cfg, Options{ListenAddr: busy.Addr().String()}); err == nil || !strings.Contains(err.Error(), "listen on "+busy.Addr().String()) || !strings.Contains(err.Error(), "address already in use") {
		t.Errorf("New on a busy port: %v", err)
	}

	for _, tc := range []struct {
		addr, reach string
	}{
		{"127.0.0.1:0", ""},
		{"[::1]:0", ""},
		{":0", "every interface"},
		{"0.0.0.0:0", "every interface"},
	} {
		t.Run(tc.addr, func(t *testing.T) {
			var logs syncBuffer
			a, err := New(cfg, Options{ListenAddr: tc.addr, Logger: testLogger(&logs)})
			if err != nil {
				if strings.HasPrefix(tc.addr, "[::1]") {
					t.Skipf("no IPv6 loopback here: %v", err)
				}
				t.Fatal(err)
			}
			defer a.Close()
			warned := strings.Contains(logs.String(), "msg=listening_beyond_loopback")
			if want := tc.reach != ""; warned != want {
				t.Errorf("beyond-loopback warning %v, want %v:\n%s", warned, want, logs.String())
			}
			if tc.reach != "" && !strings.Contains(logs.String(), `reach="`+tc.reach+`"`) {
				t.Errorf("log does not say %q:\n%s", tc.reach, logs.String())
			}
		})
	}
}

// get fetches a listener path and decodes its JSON body into v.
func get(t *testing.T, base, path string, v any) int {
	t.Helper()
	resp, err := http.Get(base + path)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
		t.Errorf("GET %s: content type %q", path, ct)
	}
	if v != nil {
		if err := json.Unmarshal(body, v); err != nil {
			t.Fatalf("GET %s: %v\n%s", path, err, body)
		}
	}
	return resp.StatusCode
}

// TestListenerEndpoints runs an agent without BPF (New, then snapshots
// handed to the detector the way the loop does) against a webhook that
// refuses everything: the alert arrives with a generatorURL under the
// configured external URL; that URL answers with the alert's series;
// /api/alerts lists the alert with the same URL; the refused notification
// shows under /api/dead-letters; /api/status reports the configuration.
func TestListenerEndpoints(t *testing.T) {
	var mu sync.Mutex
	var received []notify.Message
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var m notify.Message
		json.NewDecoder(r.Body).Decode(&m)
		mu.Lock()
		received = append(received, m)
		mu.Unlock()
		http.Error(w, "no such receiver", http.StatusBadRequest) // permanent: a dead letter
	}))
	defer hook.Close()

	dir := t.TempDir()
	file := fmt.Sprintf(`
rules:
  - name: Busy
    span: checkout
    when: count > 10
webhooks:
  - name: ops
    url: %s
    group_wait: 0s
routing:
  outbox: {path: %s}
external_url: http://node1.example:9464/sw/
`, hook.URL, filepath.Join(dir, "outbox.db"))
	cfg, err := config.Parse("rules.yaml", []byte(file), config.LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	a, err := New(cfg, Options{ListenAddr: "127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	a.listener.serve()
	base := "http://" + a.Addr().String()

	if code := get(t, base, "/snapshot", nil); code != http.StatusServiceUnavailable {
		t.Errorf("/snapshot before the first snapshot: %d", code)
	}
	snap := &snapshot.Snapshot{Version: snapshot.Version, Time: time.Now(), WindowNs: int64(time.Second), Series: []snapshot.Series{
		{Span: "checkout", CgroupID: 42, Count: 50},
		{Span: "checkout", CgroupID: 7, Count: 3},
		{Span: "other", CgroupID: 42, Count: 99},
	}}
	if _, err := a.det.Evaluate(context.Background(), snap); err != nil {
		t.Fatal(err)
	}
	a.last.set(snap)

	wantURL := "http://node1.example:9464/sw/snapshot?cgroup_id=42&span=checkout"
	var alerts []alert.Alert
	if code := get(t, base, "/api/alerts", &alerts); code != http.StatusOK || len(alerts) != 1 {
		t.Fatalf("/api/alerts: %d, %+v", code, alerts)
	}
	if alerts[0].Name() != "Busy" || alerts[0].GeneratorURL != wantURL {
		t.Errorf("alert %s with generatorURL %q, want %q", alerts[0].Name(), alerts[0].GeneratorURL, wantURL)
	}

	// The generatorURL's path and query, asked of the listener, give the
	// alert's series and nothing else.
	var part snapshot.Snapshot
	if code := get(t, base, strings.TrimPrefix(wantURL, "http://node1.example:9464/sw"), &part); code != http.StatusOK {
		t.Fatalf("generatorURL: %d", code)
	}
	if len(part.Series) != 1 || part.Series[0].CgroupID != 42 || part.Series[0].Span != "checkout" || part.Series[0].Count != 50 {
		t.Errorf("generatorURL answered %+v", part.Series)
	}
	for _, tc := range []struct {
		path   string
		code   int
		series int
	}{
		{"/snapshot", 200, 3},
		{"/snapshot?span=checkout", 200, 2},
		{"/snapshot?cgroup_id=42", 200, 2},
		{"/snapshot?span=nope", 404, 0},
		{"/snapshot?cgroup_id=x", 400, 0},
	} {
		var s snapshot.Snapshot
		if code := get(t, base, tc.path, &s); code != tc.code || len(s.Series) != tc.series {
			t.Errorf("GET %s: %d with %d series, want %d with %d", tc.path, code, len(s.Series), tc.code, tc.series)
		}
	}

	// The webhook refused the notification: it becomes a dead letter, and
	// the payload it got carried the generatorURL and the externalURL.
	var dead []notify.DeadLetter
	deadline := time.Now().Add(10 * time.Second)
	for len(dead) == 0 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
		get(t, base, "/api/dead-letters", &dead)
	}
	if len(dead) != 1 || dead[0].Webhook != "ops" || dead[0].Reason != notify.ReasonHTTP4xx || !strings.Contains(dead[0].Error, "no such receiver") {
		t.Fatalf("dead letters: %+v", dead)
	}
	var body notify.Message
	if err := json.Unmarshal(dead[0].Body, &body); err != nil || len(body.Alerts) != 1 || body.Alerts[0].GeneratorURL != wantURL {
		t.Errorf("dead letter body: %v %+v", err, body)
	}
	mu.Lock()
	if len(received) != 1 || received[0].Alerts[0].GeneratorURL != wantURL || received[0].ExternalURL != "http://node1.example:9464/sw/" {
		t.Errorf("webhook received %+v", received)
	}
	mu.Unlock()

	var st Status
	if code := get(t, base, "/api/status", &st); code != 200 || st.ExternalURL != "http://node1.example:9464/sw" || st.Interval != "10s" || len(st.RestartPending) != 0 {
		t.Errorf("/api/status: %d %+v", code, st)
	}
	if code := get(t, base, "/api/alerts", nil); code != 200 {
		t.Errorf("/api/alerts: %d", code)
	}
	resp, err := http.Post(base+"/api/alerts", "application/json", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusMethodNotAllowed {
		t.Errorf("POST /api/alerts: %d", resp.StatusCode)
	}
}

// TestGeneratorURL checks the URL for each kind of alert, and the default
// base when no external URL is configured.
func TestGeneratorURL(t *testing.T) {
	for _, tc := range []struct {
		name string
		a    alert.Alert
		want string
	}{
		{"rule", alert.Alert{Labels: map[string]string{"span": "db query", "cgroup_id": "9"}}, "http://x/snapshot?cgroup_id=9&span=db+query"},
		{"overrun", alert.Alert{Labels: map[string]string{"span": "a"}, Series: &alert.SeriesRef{Span: "a", CgroupID: 5}}, "http://x/snapshot?cgroup_id=5&span=a"},
		{"policy without a series", alert.Alert{Labels: map[string]string{"alertname": "X"}}, "http://x/snapshot"},
	} {
		if got := generatorURL("http://x", &tc.a); got != tc.want {
			t.Errorf("%s: %q, want %q", tc.name, got, tc.want)
		}
	}
	if got := generatorURL("", &alert.Alert{}); got != "" {
		t.Errorf("no base: %q", got)
	}

	cfg, err := config.Parse("rules.yaml", []byte("rules: []\n"), config.LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv("NODE_NAME", "node7")
	a, err := New(cfg, Options{ListenAddr: "127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	_, port, _ := net.SplitHostPort(a.Addr().String())
	if got, want := a.externalURL(), "http://node7:"+port; got != want {
		t.Errorf("default external URL %q, want %q", got, want)
	}
	b, err := New(cfg, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if got := b.externalURL(); got != "" {
		t.Errorf("without a listener: %q", got)
	}
}
