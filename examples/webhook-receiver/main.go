// Command webhook-receiver is a minimal receiver for spanwatch's webhooks:
// it verifies each request's HMAC signature and timestamp, drops
// duplicates by idempotency key, and prints the alerts.
//
//	go run ./examples/webhook-receiver -listen 127.0.0.1:9099 -secret-file hook.key
//
// The signature check is written out here, from its definition, so it can
// be ported to any language:
//
//	X-Spanwatch-Timestamp: <Unix seconds when the attempt was made>
//	X-Spanwatch-Signature: sha256=<hex HMAC-SHA256(key, "<timestamp>.<body>")>
//
// where key is the content of the webhook's hmac_secret_file without
// trailing newlines, and body is the raw request body, byte for byte.
package main

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/spanwatch/spanwatch/notify"
)

func main() {
	listen := flag.String("listen", "127.0.0.1:9099", "`ADDR` to listen on")
	secretFile := flag.String("secret-file", "", "`FILE` holding the webhook's hmac_secret_file key (required)")
	tolerance := flag.Duration("tolerance", 5*time.Minute, "reject requests whose timestamp is further than this from now")
	flag.Parse()
	if *secretFile == "" {
		fmt.Fprintln(os.Stderr, "webhook-receiver: -secret-file is required")
		os.Exit(2)
	}
	key, err := os.ReadFile(*secretFile)
	if err != nil {
		log.Fatalf("webhook-receiver: %v", err)
	}
	h := newHandler(strings.TrimRight(string(key), "\r\n"), *tolerance, os.Stdout)
	log.Printf("webhook-receiver: listening on %s", *listen)
	log.Fatal(http.ListenAndServe(*listen, h))
}

// handler verifies, deduplicates and prints notifications.
type handler struct {
	key       []byte
	tolerance time.Duration
	now       func() time.Time

	mu   sync.Mutex
	out  io.Writer
	seen map[string]time.Time // idempotency key -> when first seen
}

func newHandler(key string, tolerance time.Duration, out io.Writer) *handler {
	return &handler{key: []byte(key), tolerance: tolerance, now: time.Now, out: out, seen: map[string]time.Time{}}
}

var (
	errUnsigned = errors.New("missing X-Spanwatch-Signature or X-Spanwatch-Timestamp")
	errMismatch = errors.New("signature does not match the body")
	errStale    = errors.New("timestamp too far from now: replayed, or clocks differ")
)

// verify checks the signature of one request.
func (h *handler) verify(r *http.Request, body []byte) error {
	ts, sig := r.Header.Get("X-Spanwatch-Timestamp"), r.Header.Get("X-Spanwatch-Signature")
	if ts == "" || sig == "" {
		return errUnsigned
	}
	sec, err := strconv.ParseInt(ts, 10, 64)
	if err != nil {
		return errMismatch
	}
	mac := hmac.New(sha256.New, h.key)
	mac.Write([]byte(ts))
	mac.Write([]byte{'.'})
	mac.Write(body)
	want := "sha256=" + hex.EncodeToString(mac.Sum(nil))
	// Constant-time comparison: no timing hints about the right value.
	if !hmac.Equal([]byte(sig), []byte(want)) {
		return errMismatch
	}
	// The timestamp is covered by the signature, so an attacker cannot
	// refresh it; an old one means a captured request sent again.
	if d := h.now().Sub(time.Unix(sec, 0)); d > h.tolerance || d < -h.tolerance {
		return errStale
	}
	return nil
}

func (h *handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		http.Error(w, "POST only", http.StatusMethodNotAllowed)
		return
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, 4<<20))
	if err != nil {
		http.Error(w, "read body", http.StatusBadRequest)
		return
	}
	if err := h.verify(r, body); err != nil {
		// 401 is permanent for spanwatch: it will not retry a request
		// that a wrong key would fail again.
		http.Error(w, err.Error(), http.StatusUnauthorized)
		return
	}
	var m notify.Message
	if err := json.Unmarshal(body, &m); err != nil {
		http.Error(w, "payload: "+err.Error(), http.StatusBadRequest)
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	// spanwatch delivers at least once: a retry after a lost answer
	// carries the same idempotency key. Remember keys for a day.
	id := r.Header.Get("X-Spanwatch-Idempotency-Key")
	now := h.now()
	for k, at := range h.seen {
		if now.Sub(at) > 24*time.Hour {
			delete(h.seen, k)
		}
	}
	if _, dup := h.seen[id]; dup && id != "" {
		fmt.Fprintf(h.out, "duplicate %s ignored\n", id)
		return
	}
	h.seen[id] = now
	fmt.Fprintf(h.out, "notification %s from %s: %s, %d alerts, group %s\n", id, m.Receiver, m.Status, len(m.Alerts), m.GroupKey)
	for _, a := range m.Alerts {
		fmt.Fprintf(h.out, "  [%s] %s %v: %s\n", a.Status, a.Labels["alertname"], a.Labels, a.Annotations["summary"])
		if t := a.Annotations["trace_id"]; t != "" {
			fmt.Fprintf(h.out, "    trace %s\n", t)
		}
		if s := a.Annotations["stack"]; s != "" {
			fmt.Fprintf(h.out, "    stack:\n      %s\n", strings.ReplaceAll(s, "\n", "\n      "))
		}
	}
}
