package notify

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/spanwatch/spanwatch/alert"
)

// parseYAML parses a config file's text the way spanwatch does.
func parseYAML(t testing.TB, text string) *Config {
	t.Helper()
	c, err := ParseConfigFile("test.yaml", []byte(text))
	if err != nil {
		t.Fatalf("parse config: %v\n%s", err, text)
	}
	return c
}

// webhookConfig returns a config with one webhook named "test" at url,
// short intervals, an outbox in dir, and extra webhook keys.
func webhookConfig(t testing.TB, url, dir, extra string) *Config {
	t.Helper()
	keys := []string{"timeout: 200ms", "group_wait: 20ms", "group_interval: 50ms", "repeat_interval: 1h", "min_backoff: 10ms", "max_backoff: 100ms"}
	var lines []string
	for _, k := range keys {
		name, _, _ := strings.Cut(k, ":")
		if !strings.Contains("\n"+strings.TrimSpace(extra), "\n"+name+":") {
			lines = append(lines, k)
		}
	}
	text := fmt.Sprintf(`
webhooks:
  - name: test
    url: %s
%s
%s
routing:
  outbox: {path: %q}
`, url, indent(strings.Join(lines, "\n"), "    "), indent(extra, "    "), filepath.Join(dir, "outbox.db"))
	return parseYAML(t, text)
}

func indent(s, pre string) string {
	if strings.TrimSpace(s) == "" {
		return ""
	}
	lines := strings.Split(strings.TrimSpace(s), "\n")
	for i, l := range lines {
		lines[i] = pre + l
	}
	return strings.Join(lines, "\n")
}

func mustNew(t testing.TB, c *Config) *Dispatcher {
	t.Helper()
	d, err := New(c, Options{Logger: testLogger(t)})
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() { d.Close() })
	return d
}

// mkAlert makes alert i of group g in the given state.
func mkAlert(g string, i int, state alert.State, start time.Time) *alert.Alert {
	labels := map[string]string{"alertname": "Slow" + g, "span": g, "instance": fmt.Sprint(i)}
	a := &alert.Alert{Labels: labels, State: state, StartsAt: start, Fingerprint: alert.Fingerprint(labels),
		Annotations: map[string]string{"summary": fmt.Sprintf("%s %d", g, i)}}
	if state == alert.StateResolved {
		a.EndsAt = start.Add(time.Second)
	}
	return a
}

// receiver is an httptest webhook receiver that records every notification
// it accepts, dropping duplicates by idempotency key, as a receiver should.
// fail, when set, may answer a request itself (returning true) to fail it.
type receiver struct {
	t    testing.TB
	srv  *httptest.Server
	mu   sync.Mutex
	n    int // requests seen
	seen map[string]bool
	msgs []*Message
	at   []time.Time // when each message arrived
	dups int
	fail func(n int, w http.ResponseWriter, r *http.Request) bool
	// after, when set, runs once a request was processed, before the
	// answer: a slow acknowledgement.
	after func(n int, r *http.Request)
	hdrs  []http.Header
}

func newReceiver(t testing.TB, fail func(int, http.ResponseWriter, *http.Request) bool) *receiver {
	rc := &receiver{t: t, seen: map[string]bool{}, fail: fail}
	rc.srv = httptest.NewUnstartedServer(rc)
	return rc
}

func (rc *receiver) start() *receiver { rc.srv.Start(); rc.t.Cleanup(rc.srv.Close); return rc }

func (rc *receiver) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	rc.mu.Lock()
	rc.n++
	n := rc.n
	rc.mu.Unlock()
	if rc.fail != nil && rc.fail(n, w, r) {
		return
	}
	body, err := io.ReadAll(r.Body)
	if err != nil {
		return
	}
	dec := json.NewDecoder(strings.NewReader(string(body)))
	dec.DisallowUnknownFields()
	var m Message
	if err := dec.Decode(&m); err != nil {
		rc.t.Errorf("receiver: decode payload: %v: %s", err, body)
		http.Error(w, "bad payload", http.StatusBadRequest)
		return
	}
	key := r.Header.Get(IdempotencyKeyHeader)
	if rc.after != nil {
		defer rc.after(n, r)
	}
	rc.mu.Lock()
	defer rc.mu.Unlock()
	rc.hdrs = append(rc.hdrs, r.Header.Clone())
	if key == "" {
		rc.t.Errorf("receiver: request without %s", IdempotencyKeyHeader)
	}
	if rc.seen[key] {
		rc.dups++
		return
	}
	rc.seen[key] = true
	rc.msgs = append(rc.msgs, &m)
	rc.at = append(rc.at, time.Now())
}

func (rc *receiver) messages() []*Message {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return append([]*Message(nil), rc.msgs...)
}

func (rc *receiver) times() []time.Time {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return append([]time.Time(nil), rc.at...)
}

func (rc *receiver) duplicates() int {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return rc.dups
}

func (rc *receiver) requests() int {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return rc.n
}

// delivered returns the set of "fingerprint status" pairs received.
func delivered(msgs []*Message) map[string]bool {
	out := map[string]bool{}
	for _, m := range msgs {
		for _, a := range m.Alerts {
			out[a.Fingerprint+" "+a.Status] = true
		}
	}
	return out
}

func expected(alerts []*alert.Alert) map[string]bool {
	out := map[string]bool{}
	for _, a := range alerts {
		st := "firing"
		if a.Resolved() {
			st = "resolved"
		}
		out[a.Fingerprint+" "+st] = true
	}
	return out
}

func diffSets(got, want map[string]bool) string {
	var missing, extra []string
	for k := range want {
		if !got[k] {
			missing = append(missing, k)
		}
	}
	for k := range got {
		if !want[k] {
			extra = append(extra, k)
		}
	}
	sort.Strings(missing)
	sort.Strings(extra)
	if len(missing)+len(extra) == 0 {
		return ""
	}
	return fmt.Sprintf("missing %v, unexpected %v", missing, extra)
}

// waitFor polls cond until it holds or the deadline passes.
func waitFor(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", timeout, what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// checkOrder verifies that, per group and per alert, no notification
// carries an older state than one received before it: firing may turn
// resolved, never the reverse (for the same startsAt).
func checkOrder(t testing.TB, msgs []*Message) {
	t.Helper()
	state := map[string]string{}
	for i, m := range msgs {
		for _, a := range m.Alerts {
			k := m.GroupKey + " " + a.Fingerprint
			if state[k] == "resolved" && a.Status == "firing" {
				t.Errorf("message %d: alert %s firing after it was reported resolved: order lost", i, a.Fingerprint)
			}
			state[k] = a.Status
		}
	}
}

func notifyOK(t testing.TB, d *Dispatcher, alerts ...*alert.Alert) {
	t.Helper()
	if retry, err := d.Notify(context.Background(), alerts...); err != nil {
		t.Fatalf("Notify: retry=%v err=%v", retry, err)
	}
}
