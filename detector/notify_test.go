package detector_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/spanwatch/spanwatch/config"
	"github.com/spanwatch/spanwatch/detector"
	"github.com/spanwatch/spanwatch/internal/amtest"
	"github.com/spanwatch/spanwatch/notify"
	"github.com/spanwatch/spanwatch/policy"
	"github.com/spanwatch/spanwatch/snapshot"
)

// TestEndToEndWebhook runs one rule file through the detector and the real
// notifier (durable outbox, Alertmanager webhook payload) to an HTTP
// receiver: the rule fires, then resolves, and both reach the receiver.
func TestEndToEndWebhook(t *testing.T) {
	type post struct {
		Status string `json:"status"`
		Alerts []struct {
			Status      string            `json:"status"`
			Labels      map[string]string `json:"labels"`
			Annotations map[string]string `json:"annotations"`
		} `json:"alerts"`
	}
	var mu sync.Mutex
	var posts []post
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		var p post
		if err := json.Unmarshal(body, &p); err != nil {
			t.Errorf("receiver: %v: %s", err, body)
		}
		mu.Lock()
		posts = append(posts, p)
		mu.Unlock()
	}))
	defer srv.Close()

	src := fmt.Sprintf(`
rules:
  - name: CheckoutSlow
    span: checkout
    when: p99 > 200ms
    over: 0s
    labels: {severity: page}
    annotations: {summary: "p99 {{ .Value }}"}
webhooks:
  - name: ops
    url: %s
    group_wait: 0s
    group_interval: 10ms
routing:
  outbox: {path: %s}
`, srv.URL, filepath.Join(t.TempDir(), "outbox.db"))
	cfg, err := policy.Parse("spanwatch.yaml", []byte(src), policy.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ncfg, err := notify.ParseConfigFile(cfg.Name, []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	disp, err := notify.New(ncfg, notify.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer disp.Close()

	d := detector.New(detector.Config{Notifier: disp})
	d.SetRules(cfg)
	ctx := context.Background()
	t0 := time.Now()
	for i, p99 := range []uint64{300e6, 100e6} {
		snap := &snapshot.Snapshot{Version: snapshot.Version, Time: t0.Add(time.Duration(i) * time.Second), WindowNs: 1e9,
			Series: []snapshot.Series{{Span: "checkout", Identity: snapshot.Identity{Container: "web-1"}, Count: 10, P99Ns: p99}}}
		if _, err := d.Evaluate(ctx, snap); err != nil {
			t.Fatal(err)
		}
		want := []string{"firing", "resolved"}[i]
		deadline := time.Now().Add(10 * time.Second)
		for {
			mu.Lock()
			var got *post
			for j := range posts {
				if posts[j].Status == want {
					got = &posts[j]
				}
			}
			mu.Unlock()
			if got != nil {
				a := got.Alerts[0]
				if a.Labels["alertname"] != "CheckoutSlow" || a.Labels["container"] != "web-1" || a.Labels["severity"] != "page" || a.Annotations["summary"] != "p99 300ms" {
					t.Errorf("%s alert = %+v", want, a)
				}
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("no %s notification reached the receiver (got %+v)", want, posts)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
}

// amAlert is the part of Alertmanager's GET /api/v2/alerts answer the
// tests read.
type amAlert struct {
	Labels      map[string]string `json:"labels"`
	Fingerprint string            `json:"fingerprint"`
	StartsAt    time.Time         `json:"startsAt"`
	EndsAt      time.Time         `json:"endsAt"`
	Status      struct {
		State string `json:"state"`
	} `json:"status"`
}

func amAlerts(t *testing.T, url string) []amAlert {
	t.Helper()
	resp, err := http.Get(url + "/api/v2/alerts")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out []amAlert
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		t.Fatalf("decode alerts: %v", err)
	}
	return out
}

const amConfig = `
route:
  receiver: nobody
  group_by: [alertname]
  group_wait: 100ms
  group_interval: 200ms
  repeat_interval: 1h
receivers:
  - name: nobody
`

// agentRules is a rule file whose one webhook posts to a real
// Alertmanager's API.
func agentRules(t *testing.T, amURL, extra string) *config.Config {
	t.Helper()
	src := fmt.Sprintf(`
rules:
  - {name: CheckoutSlow, span: checkout, when: p99 > 200ms, over: 0s}
webhooks:
  - name: am
    url: %s/api/v2/alerts
    format: alertmanager-api
    group_wait: 0s
    group_interval: 50ms
    repeat_interval: 200ms
    min_backoff: 10ms
    max_backoff: 100ms
routing:
  outbox: {path: %s}
%s`, amURL, filepath.Join(t.TempDir(), "outbox.db"), extra)
	cfg, err := config.Parse("spanwatch.yaml", []byte(src), config.LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

func dispatcherFor(t *testing.T, cfg *config.Config) *notify.Dispatcher {
	t.Helper()
	disp, err := notify.New(cfg.Notify, notify.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { disp.Close() })
	return disp
}

func slowCheckout(now time.Time, window time.Duration) *snapshot.Snapshot {
	return &snapshot.Snapshot{Version: snapshot.Version, Time: now, WindowNs: int64(window),
		Series: []snapshot.Series{{Span: "checkout", Identity: snapshot.Identity{Container: "web-1"}, Count: 100, P99Ns: 300e6}}}
}

// TestTwoNodesTwoAlerts runs two detectors, as on two nodes, with the same
// rules over the same series, into one real Alertmanager: their node
// labels keep the alerts apart, so Alertmanager holds two.
func TestTwoNodesTwoAlerts(t *testing.T) {
	am := amtest.Start(t, amConfig)
	ctx := context.Background()
	now := time.Now()
	for _, node := range []string{"node-a", "node-b"} {
		cfg := agentRules(t, am.URL, "")
		d := detector.New(detector.Config{Notifier: dispatcherFor(t, cfg), ExternalLabels: map[string]string{detector.NodeLabel: node}})
		d.SetRules(cfg.Rules)
		if _, err := d.Evaluate(ctx, slowCheckout(now, 10*time.Second)); err != nil {
			t.Fatal(err)
		}
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		got := amAlerts(t, am.URL)
		if len(got) == 2 {
			nodes := map[string]bool{}
			for _, a := range got {
				if a.Labels["alertname"] != "CheckoutSlow" || a.Labels["span"] != "checkout" || a.Status.State != "active" {
					t.Errorf("alert %+v", a)
				}
				nodes[a.Labels["node"]] = true
			}
			if !nodes["node-a"] || !nodes["node-b"] || got[0].Fingerprint == got[1].Fingerprint {
				t.Errorf("alerts %+v, want one from node-a and one from node-b", got)
			}
			return
		}
		if len(got) > 2 || time.Now().After(deadline) {
			t.Fatalf("Alertmanager holds %d alerts, want 2: %+v", len(got), got)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestAlertmanagerKeepsFiring evaluates a rule that keeps holding for 5s,
// with a 500ms resend interval (so each alert sent is valid for 2s),
// while polling a real Alertmanager: once there, the alert stays active
// without a gap, with one startsAt, while its endsAt moves on. When the
// evaluations stop (the agent is gone), Alertmanager resolves it by itself
// once the last endsAt passes.
func TestAlertmanagerKeepsFiring(t *testing.T) {
	am := amtest.Start(t, amConfig)
	cfg := agentRules(t, am.URL, "")
	const resend, window = 500 * time.Millisecond, 100 * time.Millisecond
	d := detector.New(detector.Config{Notifier: dispatcherFor(t, cfg), ResendInterval: resend, ExternalLabels: map[string]string{}})
	d.SetRules(cfg.Rules)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	evalDone := make(chan struct{})
	go func() {
		defer close(evalDone)
		stop := time.After(5 * time.Second)
		tick := time.NewTicker(window)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case now := <-tick.C:
				if _, err := d.Evaluate(ctx, slowCheckout(now, window)); err != nil {
					t.Error(err)
				}
			}
		}
	}()
	var seen bool
	var startsAt, lastEnds time.Time
	endsMoved := 0
	for polling := true; polling; {
		select {
		case <-evalDone:
			polling = false
		case <-time.After(50 * time.Millisecond):
		}
		got := amAlerts(t, am.URL)
		switch {
		case len(got) == 0 && seen && polling:
			t.Fatalf("the alert left Alertmanager while the rule still held (last endsAt %v, now %v)", lastEnds, time.Now())
		case len(got) == 0:
			continue
		case len(got) > 1:
			t.Fatalf("%d alerts, want 1: %+v", len(got), got)
		}
		a := got[0]
		if a.Status.State != "active" {
			t.Fatalf("alert is %s while the rule holds", a.Status.State)
		}
		if !seen {
			seen, startsAt = true, a.StartsAt
		}
		if !a.StartsAt.Equal(startsAt) {
			t.Errorf("startsAt changed from %v to %v: Alertmanager sees a new alert", startsAt, a.StartsAt)
		}
		if a.EndsAt.After(lastEnds) {
			if !lastEnds.IsZero() {
				endsMoved++
			}
			lastEnds = a.EndsAt
		}
	}
	if !seen || endsMoved < 3 {
		t.Fatalf("seen %v, endsAt moved %d times; want the alert, resent every %v", seen, endsMoved, resend)
	}
	// The agent stopped: the alert ends at its last endsAt (at most
	// 4 x 500ms after the last resend).
	deadline := time.Now().Add(10 * time.Second)
	for len(amAlerts(t, am.URL)) > 0 {
		if time.Now().After(deadline) {
			t.Fatalf("the alert outlived its endsAt %v by 10s", lastEnds)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if gone := time.Now(); gone.Before(lastEnds.Add(-100 * time.Millisecond)) {
		t.Errorf("the alert left at %v, before its endsAt %v", gone, lastEnds)
	}
}
