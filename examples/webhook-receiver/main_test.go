package main

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/spanwatch/spanwatch/notify"
)

type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestReceiverVerifiesSpanwatch runs a real notify.Dispatcher against the
// receiver: signed notifications are accepted and printed.
func TestReceiverVerifiesSpanwatch(t *testing.T) {
	dir := t.TempDir()
	keyFile := filepath.Join(dir, "hook.key")
	if err := os.WriteFile(keyFile, []byte("example-key\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	var out lockedBuffer
	srv := httptest.NewServer(newHandler("example-key", 5*time.Minute, &out))
	defer srv.Close()
	cfg, err := notify.ParseConfigFile("spanwatch.yaml", []byte(fmt.Sprintf(`
webhooks:
  - name: example
    url: %s
    hmac_secret_file: %s
    group_wait: 10ms
    max_attempts: 1
routing:
  outbox: {path: %q}
`, srv.URL, keyFile, filepath.Join(dir, "outbox.db"))))
	if err != nil {
		t.Fatal(err)
	}
	d, err := notify.New(cfg, notify.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if _, err := d.Notify(context.Background(), notify.SampleAlert(time.Now())); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := d.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	s := d.Stats().Webhooks[0]
	if s.Delivered != 1 {
		t.Fatalf("delivered %d, failures %v, last error %s", s.Delivered, s.Failures, s.LastError)
	}
	for _, want := range []string{"from example: firing, 1 alerts", "[firing] SpanwatchTest", "trace 4bf92f3577b34da6a3ce929d0e0e4736", "main.loadCart (/src/shop/cart.go:88)"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("receiver output lacks %q:\n%s", want, out.String())
		}
	}
}

// TestReceiverRejects checks each way a request can fail verification.
func TestReceiverRejects(t *testing.T) {
	body := []byte(`{"version":"4","status":"firing","receiver":"x","alerts":[]}`)
	now := time.Now()
	sign := func(key string, ts int64, b []byte) http.Header {
		h := http.Header{}
		h.Set("X-Spanwatch-Timestamp", strconv.FormatInt(ts, 10))
		h.Set("X-Spanwatch-Signature", notify.Sign([]byte(key), ts, b))
		h.Set("X-Spanwatch-Idempotency-Key", "k1")
		return h
	}
	tests := []struct {
		name     string
		header   http.Header
		body     []byte
		wantCode int
		wantBody string
	}{
		{"valid", sign("example-key", now.Unix(), body), body, 200, ""},
		{"duplicate", sign("example-key", now.Unix(), body), body, 200, ""},
		{"unsigned", http.Header{}, body, 401, "missing X-Spanwatch-Signature"},
		{"wrong key", sign("other-key", now.Unix(), body), body, 401, "signature does not match"},
		{"tampered body", sign("example-key", now.Unix(), body), append([]byte(" "), body...), 401, "signature does not match"},
		{"replayed", sign("example-key", now.Add(-10*time.Minute).Unix(), body), body, 401, "timestamp too far"},
		{"from the future", sign("example-key", now.Add(10*time.Minute).Unix(), body), body, 401, "timestamp too far"},
	}
	var out lockedBuffer
	h := newHandler("example-key", 5*time.Minute, &out)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := httptest.NewRequest(http.MethodPost, "/", bytes.NewReader(tt.body))
			r.Header = tt.header
			w := httptest.NewRecorder()
			h.ServeHTTP(w, r)
			if w.Code != tt.wantCode || !strings.Contains(w.Body.String(), tt.wantBody) {
				t.Errorf("answer %d %q, want %d %q", w.Code, w.Body.String(), tt.wantCode, tt.wantBody)
			}
		})
	}
	if n := strings.Count(out.String(), "notification k1"); n != 1 {
		t.Errorf("the notification was printed %d times, want once:\n%s", n, out.String())
	}
	if !strings.Contains(out.String(), "duplicate k1 ignored") {
		t.Errorf("duplicate not reported:\n%s", out.String())
	}
}
