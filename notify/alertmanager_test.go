package notify

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"reflect"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/spanwatch/spanwatch/alert"
	"github.com/spanwatch/spanwatch/internal/amtest"
)

// jsonKeys returns the JSON field names of struct type v.
func jsonKeys(v any) []string {
	var out []string
	rt := reflect.TypeOf(v)
	for i := range rt.NumField() {
		name, _, _ := bytes.Cut([]byte(rt.Field(i).Tag.Get("json")), []byte(","))
		out = append(out, string(name))
	}
	slices.Sort(out)
	return out
}

// TestRealAlertmanager pushes alerts into a real Alertmanager through
// format: alertmanager-api, reads them back from its API, and lets
// Alertmanager's own webhook notifier post to a receiver that decodes with
// Message strictly: the payload types match what Alertmanager sends, field
// for field.
func TestRealAlertmanager(t *testing.T) {
	var mu sync.Mutex
	var msgs []*Message
	var keyErrs []string
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		dec := json.NewDecoder(bytes.NewReader(body))
		dec.DisallowUnknownFields()
		var m Message
		if err := dec.Decode(&m); err != nil {
			t.Errorf("Alertmanager's payload does not decode into Message: %v\n%s", err, body)
			return
		}
		// Every field of Message must be in Alertmanager's payload too.
		var raw map[string]json.RawMessage
		json.Unmarshal(body, &raw)
		var rawAlerts []map[string]json.RawMessage
		json.Unmarshal(raw["alerts"], &rawAlerts)
		mu.Lock()
		defer mu.Unlock()
		if got, want := slices.Sorted(maps.Keys(raw)), jsonKeys(Message{}); !slices.Equal(got, want) {
			keyErrs = append(keyErrs, fmt.Sprintf("payload keys %v, Message has %v", got, want))
		}
		for _, a := range rawAlerts {
			if got, want := slices.Sorted(maps.Keys(a)), jsonKeys(PayloadAlert{}); !slices.Equal(got, want) {
				keyErrs = append(keyErrs, fmt.Sprintf("alert keys %v, PayloadAlert has %v", got, want))
			}
		}
		msgs = append(msgs, &m)
	}))
	defer hook.Close()

	am := amtest.Start(t, fmt.Sprintf(`
route:
  receiver: spanwatch-test
  group_by: [alertname]
  group_wait: 100ms
  group_interval: 300ms
  repeat_interval: 1h
receivers:
  - name: spanwatch-test
    webhook_configs:
      - url: %s/am-hook
        send_resolved: true
`, hook.URL))

	c := webhookConfig(t, am.URL+"/api/v2/alerts", t.TempDir(), "format: alertmanager-api")
	d := mustNew(t, c)
	now := time.Now().Truncate(time.Second)
	overrun := SampleAlert(now)
	plain := mkAlert("x", 1, alert.StateFiring, now)
	notifyOK(t, d, overrun, plain)

	// The alerts show up in Alertmanager's API with their labels and the
	// overrun's stack and trace id.
	type gettable struct {
		Labels      map[string]string `json:"labels"`
		Annotations map[string]string `json:"annotations"`
		StartsAt    time.Time         `json:"startsAt"`
		Fingerprint string            `json:"fingerprint"`
		Status      struct {
			State string `json:"state"`
		} `json:"status"`
	}
	var got []gettable
	waitFor(t, 10*time.Second, "alerts in GET /api/v2/alerts", func() bool {
		resp, err := http.Get(am.URL + "/api/v2/alerts")
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		got = nil
		json.NewDecoder(resp.Body).Decode(&got)
		return len(got) == 2
	})
	byName := map[string]gettable{}
	for _, g := range got {
		byName[g.Labels["alertname"]] = g
	}
	o := byName["SpanwatchTest"]
	if !maps.Equal(o.Labels, overrun.Labels) || o.Annotations["trace_id"] != overrun.Annotations["trace_id"] ||
		o.Annotations["stack"] != overrun.Annotations["stack"] || !o.StartsAt.Equal(now) || o.Status.State != "active" {
		t.Errorf("overrun alert in Alertmanager: %+v", o)
	}
	if p := byName["Slowx"]; !maps.Equal(p.Labels, plain.Labels) || p.Annotations["summary"] != "x 1" {
		t.Errorf("plain alert in Alertmanager: %+v", p)
	}

	// Alertmanager notifies our receiver with its webhook payload.
	waitFor(t, 10*time.Second, "Alertmanager's webhook notifications", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(msgs) >= 2
	})
	// Resolve one: Alertmanager learns it through the API and says so.
	resolved := mkAlert("x", 1, alert.StateResolved, now)
	resolved.EndsAt = time.Now()
	notifyOK(t, d, resolved)
	var res *Message
	waitFor(t, 10*time.Second, "the resolved notification from Alertmanager", func() bool {
		mu.Lock()
		defer mu.Unlock()
		for _, m := range msgs {
			if m.Status == "resolved" {
				res = m
				return true
			}
		}
		return false
	})
	// spanwatch notify test's path reaches Alertmanager too.
	if _, resp, err := SendTest(t.Context(), c, "test"); err != nil || resp.Err != nil || resp.StatusCode != http.StatusOK {
		t.Errorf("SendTest to Alertmanager: %v, %+v", err, resp)
	}
	mu.Lock()
	defer mu.Unlock()
	for _, e := range keyErrs {
		t.Error(e)
	}
	var first *Message
	for _, m := range msgs {
		if m.GroupLabels["alertname"] == "SpanwatchTest" {
			first = m
		}
	}
	if first == nil {
		t.Fatalf("no notification for SpanwatchTest among %d", len(msgs))
	}
	a := first.Alerts[0]
	if first.Version != "4" || first.Receiver != "spanwatch-test" || first.Status != "firing" || first.GroupKey == "" ||
		a.Fingerprint == "" || a.Labels["span"] != "checkout" || a.Annotations["trace_id"] != overrun.Annotations["trace_id"] || !a.StartsAt.Equal(now) {
		t.Errorf("Alertmanager's notification: %+v", first)
	}
	if ra := res.Alerts[0]; ra.Status != "resolved" || ra.Labels["alertname"] != "Slowx" || ra.EndsAt.IsZero() {
		t.Errorf("resolved notification: %+v", res)
	}
}
