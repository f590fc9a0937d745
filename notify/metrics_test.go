package notify

import (
	"net/http"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/spanwatch/spanwatch/alert"
)

func TestCollector(t *testing.T) {
	rc := newReceiver(t, func(n int, w http.ResponseWriter, r *http.Request) bool {
		if n == 1 {
			w.WriteHeader(http.StatusServiceUnavailable)
			return true
		}
		return false
	}).start()
	d := mustNew(t, webhookConfig(t, rc.srv.URL, t.TempDir(), ""))
	reg := prometheus.NewPedanticRegistry()
	if err := reg.Register(NewCollector(d)); err != nil {
		t.Fatal(err)
	}
	notifyOK(t, d, mkAlert("a", 1, alert.StateFiring, time.Now()))
	waitFor(t, 5*time.Second, "delivery", func() bool { return len(rc.messages()) == 1 })
	waitFor(t, time.Second, "queue drained", func() bool { return d.Stats().Webhooks[0].QueueDepth == 0 })
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			key := mf.GetName()
			for _, l := range m.GetLabel() {
				if l.GetName() == "reason" {
					key += "/" + l.GetValue()
				}
			}
			switch {
			case m.Counter != nil:
				got[key] = m.GetCounter().GetValue()
			case m.Gauge != nil:
				got[key] = m.GetGauge().GetValue()
			}
		}
	}
	want := map[string]float64{
		"spanwatch_notify_attempts_total":             2,
		"spanwatch_notify_delivered_total":            1,
		"spanwatch_notify_failures_total/http_5xx":    1,
		"spanwatch_notify_failures_total/timeout":     0,
		"spanwatch_notify_queue_depth":                0,
		"spanwatch_notify_pending_alerts":             1,
		"spanwatch_notify_oldest_undelivered_seconds": 0,
		"spanwatch_notify_outbox_entries":             1,
		"spanwatch_notify_outbox_max_entries":         DefaultOutboxMaxEntries,
		"spanwatch_notify_outbox_overflow_total":      0,
		"spanwatch_notify_outbox_damaged":             0,
		"spanwatch_notify_outbox_orphaned_entries":    0,
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s = %v, want %v", k, got[k], v)
		}
	}
}

// TestOldestUndelivered checks the age of the oldest alert that has not
// reached the receiver, while the receiver is down.
func TestOldestUndelivered(t *testing.T) {
	d := mustNew(t, webhookConfig(t, "http://127.0.0.1:1/", t.TempDir(), ""))
	notifyOK(t, d, mkAlert("a", 1, alert.StateFiring, time.Now()))
	time.Sleep(300 * time.Millisecond)
	s := d.Stats().Webhooks[0]
	if s.OldestUndelivered < 290*time.Millisecond || s.OldestUndelivered > 5*time.Second || s.QueueDepth != 1 {
		t.Errorf("oldest undelivered %s, queue %d; want about 300ms and 1", s.OldestUndelivered, s.QueueDepth)
	}
}
