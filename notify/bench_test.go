package notify

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/spanwatch/spanwatch/alert"
)

func benchAlert(i int, start time.Time) *alert.Alert {
	labels := map[string]string{"alertname": "SlowSpan", "span": fmt.Sprintf("span-%d", i%50), "instance": fmt.Sprint(i)}
	return &alert.Alert{Labels: labels, State: alert.StateFiring, StartsAt: start, Fingerprint: alert.Fingerprint(labels),
		Annotations: map[string]string{"summary": "p99 over budget"}}
}

// BenchmarkDelivery measures alerts per second from Notify to an httptest
// receiver's 200, through the outbox (each alert is written to the outbox,
// its notification queued, delivered and removed, each step one fsync'd
// bbolt transaction).
func BenchmarkDelivery(b *testing.B) {
	for _, bc := range []struct {
		name    string
		groupBy string
		batch   int
	}{
		{"one alert per notification", `["..."]`, 1},
		{"batches of 100 grouped by span", "[span]", 100},
	} {
		b.Run(bc.name, func(b *testing.B) {
			var got atomic.Int64
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				got.Add(1)
			}))
			defer srv.Close()
			c := webhookConfig(b, srv.URL, b.TempDir(), "group_wait: 0s\ngroup_interval: 10ms\ngroup_by: "+bc.groupBy)
			c.Routing.Outbox.MaxEntries = 1 << 30
			d, err := New(c, Options{})
			if err != nil {
				b.Fatal(err)
			}
			defer d.Close()
			start := time.Now()
			ctx := context.Background()
			b.ResetTimer()
			batch := make([]*alert.Alert, 0, bc.batch)
			for i := range b.N {
				batch = append(batch, benchAlert(i, start))
				if len(batch) == bc.batch || i == b.N-1 {
					if _, err := d.Notify(ctx, batch...); err != nil {
						b.Fatal(err)
					}
					batch = batch[:0]
				}
			}
			// Every alert is delivered once its group's notification is.
			deadline := time.Now().Add(time.Minute)
			for {
				s := d.Stats().Webhooks[0]
				if s.QueueDepth == 0 && s.Delivered > 0 && allNotified(d) {
					break
				}
				if time.Now().After(deadline) {
					b.Fatalf("not delivered after a minute: %+v", s)
				}
				time.Sleep(time.Millisecond)
			}
			b.StopTimer()
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "alerts/s")
			b.ReportMetric(float64(got.Load()), "requests")
		})
	}
}

// allNotified reports whether every pending alert was covered by its
// group's last notification.
func allNotified(d *Dispatcher) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, h := range d.hooks {
		for _, g := range h.groups {
			for _, sa := range g.alerts {
				if g.last == nil || !notified(g.last, sa) {
					return false
				}
			}
		}
	}
	return true
}

// BenchmarkOutboxWrite measures what Notify costs per alert: the durable
// write before it returns (group_wait is long, so nothing is sent). The
// "fsync floor" case is the figure it stands beside: one 4 KiB write and
// fsync of a plain file in the same directory, the least any durable write
// costs on this disk (a bbolt commit syncs twice: data, then meta page).
func BenchmarkOutboxWrite(b *testing.B) {
	b.Run("fsync floor", func(b *testing.B) {
		f, err := os.Create(filepath.Join(b.TempDir(), "sync"))
		if err != nil {
			b.Fatal(err)
		}
		defer f.Close()
		page := make([]byte, 4096)
		b.ResetTimer()
		for i := range b.N {
			if _, err := f.WriteAt(page, int64(i%64)*4096); err != nil {
				b.Fatal(err)
			}
			if err := f.Sync(); err != nil {
				b.Fatal(err)
			}
		}
	})
	for _, batch := range []int{1, 100} {
		b.Run(fmt.Sprintf("batch=%d", batch), func(b *testing.B) {
			c := webhookConfig(b, "http://127.0.0.1:1/", b.TempDir(), "group_wait: 1h\ngroup_by: [span]")
			c.Routing.Outbox.MaxEntries = 1 << 30
			d, err := New(c, Options{})
			if err != nil {
				b.Fatal(err)
			}
			defer d.Close()
			start := time.Now()
			alerts := make([]*alert.Alert, 0, batch)
			ctx := context.Background()
			b.ResetTimer()
			for i := 0; i < b.N; i += batch {
				alerts = alerts[:0]
				for j := i; j < i+batch && j < b.N; j++ {
					alerts = append(alerts, benchAlert(j, start))
				}
				if _, err := d.Notify(ctx, alerts...); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N), "ns/alert")
		})
	}
}
