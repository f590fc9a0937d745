package notify

import (
	"context"
	"encoding/json"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/spanwatch/spanwatch/alert"
)

// TestDeliverySurvivesFailingReceivers sends firing and then resolved
// alerts through receivers that fail in every way a network can, and
// checks that exactly the alerts sent arrive, in order per group.
func TestDeliverySurvivesFailingReceivers(t *testing.T) {
	type failFn = func(n int, w http.ResponseWriter, r *http.Request) bool
	var mu sync.Mutex
	var times []time.Time
	stamp := func() {
		mu.Lock()
		times = append(times, time.Now())
		mu.Unlock()
	}
	tests := []struct {
		name string
		fail failFn
		// minGap is the least time between the first two requests.
		minGap time.Duration
		// down keeps the receiver off the network for this long.
		down       time.Duration
		wantReason string
		// after acknowledges slowly, once the notification is processed.
		after func(n int, r *http.Request)
		// wantDups asks for duplicates: retries of processed requests.
		wantDups bool
	}{
		{name: "500 for a while", wantReason: ReasonHTTP5xx, fail: func(n int, w http.ResponseWriter, r *http.Request) bool {
			if n <= 4 {
				http.Error(w, "database is down", http.StatusInternalServerError)
				return true
			}
			return false
		}},
		{name: "429 with Retry-After seconds", wantReason: ReasonHTTP429, minGap: 900 * time.Millisecond, fail: func(n int, w http.ResponseWriter, r *http.Request) bool {
			stamp()
			if n <= 1 {
				w.Header().Set("Retry-After", "1")
				http.Error(w, "slow down", http.StatusTooManyRequests)
				return true
			}
			return false
		}},
		{name: "429 with Retry-After date", wantReason: ReasonHTTP429, minGap: 900 * time.Millisecond, fail: func(n int, w http.ResponseWriter, r *http.Request) bool {
			stamp()
			if n <= 1 {
				w.Header().Set("Retry-After", time.Now().Add(2*time.Second).UTC().Format(http.TimeFormat))
				http.Error(w, "slow down", http.StatusTooManyRequests)
				return true
			}
			return false
		}},
		{name: "hangs past the timeout", wantReason: ReasonTimeout, fail: func(n int, w http.ResponseWriter, r *http.Request) bool {
			if n <= 3 {
				select {
				case <-r.Context().Done():
				case <-time.After(2 * time.Second):
				}
				return true
			}
			return false
		}},
		{name: "processes, then answers too late", wantReason: ReasonTimeout, wantDups: true, after: func(n int, r *http.Request) {
			if n <= 2 {
				<-r.Context().Done() // the client gave up: it will send again
			}
		}},
		{name: "connection reset", wantReason: ReasonConnection, fail: func(n int, w http.ResponseWriter, r *http.Request) bool {
			if n <= 4 {
				conn, _, err := w.(http.Hijacker).Hijack()
				if err == nil {
					conn.(*net.TCPConn).SetLinger(0) // RST, not FIN
					conn.Close()
				}
				return true
			}
			return false
		}},
		{name: "down, then back", wantReason: ReasonConnection, down: 400 * time.Millisecond},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			mu.Lock()
			times = nil
			mu.Unlock()
			rc := newReceiver(t, tt.fail)
			rc.after = tt.after
			var url string
			if tt.down > 0 {
				l, err := net.Listen("tcp", "127.0.0.1:0")
				if err != nil {
					t.Fatal(err)
				}
				addr := l.Addr().String()
				l.Close()
				url = "http://" + addr + "/hook"
				go func() {
					time.Sleep(tt.down)
					l, err := net.Listen("tcp", addr)
					if err != nil {
						t.Errorf("listen again on %s: %v", addr, err)
						return
					}
					rc.srv.Listener.Close()
					rc.srv.Listener = l
					rc.start()
				}()
			} else {
				rc.start()
				url = rc.srv.URL + "/hook"
			}
			d := mustNew(t, webhookConfig(t, url, t.TempDir(), "group_by: [alertname]"))
			start := time.Now().Add(-time.Millisecond)
			var firing, resolved []*alert.Alert
			for _, g := range []string{"a", "b", "c", "d"} {
				for i := range 5 {
					firing = append(firing, mkAlert(g, i, alert.StateFiring, start))
					resolved = append(resolved, mkAlert(g, i, alert.StateResolved, start))
				}
			}
			notifyOK(t, d, firing...)
			waitFor(t, 20*time.Second, "firing alerts", func() bool { return len(delivered(rc.messages())) == len(firing) })
			notifyOK(t, d, resolved...)
			all := append(append([]*alert.Alert(nil), firing...), resolved...)
			waitFor(t, 20*time.Second, "resolved alerts", func() bool { return len(delivered(rc.messages())) == len(all) })
			// Let any late duplicate arrive before comparing.
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			if err := d.Flush(ctx); err != nil {
				t.Fatal(err)
			}
			msgs := rc.messages()
			if diff := diffSets(delivered(msgs), expected(all)); diff != "" {
				t.Errorf("delivered set differs: %s", diff)
			}
			checkOrder(t, msgs)
			s := d.Stats().Webhooks[0]
			if s.Failures[tt.wantReason] == 0 {
				t.Errorf("failures by reason = %v, want some %q", s.Failures, tt.wantReason)
			}
			if s.QueueDepth != 0 || s.PendingAlerts != 0 {
				t.Errorf("after delivery: queue depth %d, pending alerts %d, want 0 and 0", s.QueueDepth, s.PendingAlerts)
			}
			if s.Delivered != uint64(len(msgs)) {
				t.Errorf("delivered counter %d, receiver got %d distinct notifications", s.Delivered, len(msgs))
			}
			if s.Attempts <= s.Delivered {
				t.Errorf("attempts %d not above delivered %d: the failures were not retried", s.Attempts, s.Delivered)
			}
			if dups := rc.duplicates(); tt.wantDups && dups == 0 {
				t.Errorf("no duplicate deliveries: the retries of processed requests did not carry the same idempotency key")
			}
			if tt.minGap > 0 {
				mu.Lock()
				gap := times[1].Sub(times[0])
				mu.Unlock()
				if gap < tt.minGap {
					t.Errorf("retry came %s after the 429, want at least %s (Retry-After)", gap, tt.minGap)
				}
			}
		})
	}
}

// TestPermanentFailure checks that a 4xx other than 429 is not retried, is
// reported with the response body, keeps a dead letter, and does not block
// the notifications behind it.
func TestPermanentFailure(t *testing.T) {
	rc := newReceiver(t, func(n int, w http.ResponseWriter, r *http.Request) bool {
		if n == 1 {
			http.Error(w, `{"error": "field alerts[0].labels.team is required"}`+strings.Repeat(" pad", 400), http.StatusUnprocessableEntity)
			return true
		}
		return false
	}).start()
	d := mustNew(t, webhookConfig(t, rc.srv.URL, t.TempDir(), ""))
	now := time.Now()
	notifyOK(t, d, mkAlert("a", 1, alert.StateFiring, now))
	waitFor(t, 5*time.Second, "the rejection", func() bool { return d.Stats().Webhooks[0].Failures[ReasonHTTP4xx] == 1 })
	notifyOK(t, d, mkAlert("b", 1, alert.StateFiring, now))
	waitFor(t, 5*time.Second, "the next notification", func() bool { return len(rc.messages()) == 1 })
	s := d.Stats().Webhooks[0]
	if got := rc.requests(); got != 2 {
		t.Errorf("receiver saw %d requests, want 2 (the 422 must not be retried)", got)
	}
	if !strings.Contains(s.LastError, "422") || !strings.Contains(s.LastError, "alerts[0].labels.team is required") {
		t.Errorf("last error %q lacks the status and the response body", s.LastError)
	}
	if len(s.LastError) > 1000 {
		t.Errorf("last error is %d bytes: the response body was not truncated", len(s.LastError))
	}
	if m := rc.messages()[0]; m.Alerts[0].Labels["span"] != "b" {
		t.Errorf("delivered %v, want the alert of group b", m.Alerts[0].Labels)
	}
}

// TestMaxAttempts checks that a notification is given up, counted as
// expired, after max_attempts.
func TestMaxAttempts(t *testing.T) {
	rc := newReceiver(t, func(n int, w http.ResponseWriter, r *http.Request) bool {
		w.WriteHeader(http.StatusBadGateway)
		return true
	}).start()
	d := mustNew(t, webhookConfig(t, rc.srv.URL, t.TempDir(), "max_attempts: 3"))
	notifyOK(t, d, mkAlert("a", 1, alert.StateFiring, time.Now()))
	waitFor(t, 5*time.Second, "expiry", func() bool { return d.Stats().Webhooks[0].Failures[ReasonExpired] == 1 })
	s := d.Stats().Webhooks[0]
	if s.Attempts != 3 || s.Failures[ReasonHTTP5xx] != 3 || s.QueueDepth != 0 {
		t.Errorf("attempts %d, 5xx failures %d, queue %d; want 3, 3, 0", s.Attempts, s.Failures[ReasonHTTP5xx], s.QueueDepth)
	}
}

func TestBackoff(t *testing.T) {
	minB, maxB := 100*time.Millisecond, time.Second
	tests := []struct {
		attempt int
		lo, hi  time.Duration
	}{
		{1, 50 * time.Millisecond, 100 * time.Millisecond},
		{2, 100 * time.Millisecond, 200 * time.Millisecond},
		{4, 400 * time.Millisecond, 800 * time.Millisecond},
		{5, 500 * time.Millisecond, time.Second}, // capped
		{60, 500 * time.Millisecond, time.Second},
	}
	for _, tt := range tests {
		seen := map[time.Duration]bool{}
		for range 200 {
			d := backoff(minB, maxB, tt.attempt)
			if d < tt.lo || d > tt.hi {
				t.Fatalf("backoff(attempt %d) = %s, want within [%s, %s]", tt.attempt, d, tt.lo, tt.hi)
			}
			seen[d] = true
		}
		if len(seen) < 50 {
			t.Errorf("attempt %d: only %d distinct waits in 200: no jitter", tt.attempt, len(seen))
		}
	}
}

func TestParseRetryAfter(t *testing.T) {
	now := time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC)
	tests := []struct {
		in   string
		want time.Duration
	}{
		{"", 0},
		{"5", 5 * time.Second},
		{" 120 ", 2 * time.Minute},
		{"-3", 0},
		{"soon", 0},
		{"Wed, 02 Dec 2026 12:00:30 GMT", 30 * time.Second},
		{"Wednesday, 02-Dec-26 12:01:00 GMT", time.Minute}, // RFC 850
		{"Wed, 02 Dec 2026 11:00:00 GMT", 0},               // in the past
	}
	for _, tt := range tests {
		if got := parseRetryAfter(tt.in, now); got != tt.want {
			t.Errorf("parseRetryAfter(%q) = %s, want %s", tt.in, got, tt.want)
		}
	}
}

// TestCloseFinishesAttempt closes the dispatcher while a slow receiver is
// answering: the attempt completes and is recorded, so the restart does
// not send it again.
func TestCloseFinishesAttempt(t *testing.T) {
	started := make(chan struct{})
	var once sync.Once
	rc := newReceiver(t, nil)
	rc.after = func(n int, r *http.Request) {
		once.Do(func() { close(started) })
		time.Sleep(100 * time.Millisecond)
	}
	rc.start()
	dir := t.TempDir()
	d, err := New(webhookConfig(t, rc.srv.URL, dir, "timeout: 2s"), Options{})
	if err != nil {
		t.Fatal(err)
	}
	notifyOK(t, d, mkAlert("a", 1, alert.StateFiring, time.Now()))
	<-started
	d.Close()
	if s := d.Stats().Webhooks[0]; s.Delivered != 1 {
		t.Fatalf("delivered %d after Close, want the attempt under way to finish", s.Delivered)
	}
	d = mustNew(t, webhookConfig(t, rc.srv.URL, dir, "timeout: 2s"))
	time.Sleep(200 * time.Millisecond)
	if n := rc.requests(); n != 1 {
		t.Errorf("%d requests after the restart, want 1: the notification was sent again", n)
	}
	if s := d.Stats().Webhooks[0]; s.QueueDepth != 0 {
		t.Errorf("queue depth %d after restart", s.QueueDepth)
	}
}

// TestMaxAge gives a notification up after max_age and keeps it as a dead
// letter with the last error.
func TestMaxAge(t *testing.T) {
	rc := newReceiver(t, func(n int, w http.ResponseWriter, r *http.Request) bool {
		http.Error(w, "maintenance", http.StatusServiceUnavailable)
		return true
	}).start()
	d := mustNew(t, webhookConfig(t, rc.srv.URL, t.TempDir(), "max_age: 300ms"))
	start := time.Now()
	notifyOK(t, d, mkAlert("a", 1, alert.StateFiring, time.Now()))
	waitFor(t, 5*time.Second, "expiry", func() bool { return d.Stats().Webhooks[0].Failures[ReasonExpired] == 1 })
	if el := time.Since(start); el < 300*time.Millisecond {
		t.Errorf("given up after %s, before max_age", el)
	}
	var dead deadLetter
	d.db.View(func(tx *bolt.Tx) error {
		_, v := tx.Bucket(bucketDead).Bucket([]byte("test")).Cursor().First()
		return json.Unmarshal(v, &dead)
	})
	if dead.Reason != ReasonExpired || !strings.Contains(dead.Error, "503") || !strings.Contains(dead.Error, "maintenance") || dead.Alerts != 1 || len(dead.Body) == 0 {
		t.Errorf("dead letter %+v", dead)
	}
	if s := d.Stats(); s.Webhooks[0].QueueDepth != 0 || s.Outbox.Entries != 1 {
		t.Errorf("queue %d, entries %d; want 0 and 1 (the alert stays in its group)", s.Webhooks[0].QueueDepth, s.Outbox.Entries)
	}
}

// TestNoRepeatPileUp keeps the receiver down through many repeat
// intervals: one notification per group waits in the queue, not one per
// repeat, and the receiver gets the notification and one repeat once back.
func TestNoRepeatPileUp(t *testing.T) {
	var up atomic.Bool
	rc := newReceiver(t, func(n int, w http.ResponseWriter, r *http.Request) bool {
		if !up.Load() {
			w.WriteHeader(http.StatusServiceUnavailable)
			return true
		}
		return false
	}).start()
	d := mustNew(t, webhookConfig(t, rc.srv.URL, t.TempDir(), "repeat_interval: 30ms\ngroup_interval: 20ms\nmax_backoff: 20ms"))
	notifyOK(t, d, mkAlert("a", 1, alert.StateFiring, time.Now()), mkAlert("b", 1, alert.StateFiring, time.Now()))
	time.Sleep(600 * time.Millisecond) // 20 repeat intervals
	if q := d.Stats().Webhooks[0].QueueDepth; q != 2 {
		t.Errorf("queue depth %d after an outage of 20 repeat intervals, want 2 (one per group)", q)
	}
	// A change is news: it is queued behind the waiting one.
	notifyOK(t, d, mkAlert("a", 2, alert.StateFiring, time.Now()))
	waitFor(t, 2*time.Second, "the change queued", func() bool { return d.Stats().Webhooks[0].QueueDepth == 3 })
	up.Store(true)
	waitFor(t, 5*time.Second, "delivery", func() bool { return len(delivered(rc.messages())) == 3 })
	if diff := diffSets(delivered(rc.messages()), expected([]*alert.Alert{mkAlert("a", 1, alert.StateFiring, time.Now()), mkAlert("a", 2, alert.StateFiring, time.Now()), mkAlert("b", 1, alert.StateFiring, time.Now())})); diff != "" {
		t.Error(diff)
	}
}
