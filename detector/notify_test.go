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

	"github.com/spanwatch/spanwatch/detector"
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
	ncfg, err := notify.ParseConfig(cfg.Name, &cfg.Webhooks, &cfg.Routing)
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
			Series: []snapshot.Series{{Span: "checkout", Container: "web-1", Count: 10, P99Ns: p99}}}
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
