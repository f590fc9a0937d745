package notify

import "github.com/prometheus/client_golang/prometheus"

// Collector exports a Dispatcher's Stats as Prometheus metrics. Register it
// with prometheus.Registerer.Register(notify.NewCollector(d)).
type Collector struct {
	d *Dispatcher

	attempts, delivered, failures, queue, pending, oldest *prometheus.Desc
	entries, maxEntries, overflow, damaged, orphaned      *prometheus.Desc
	salvaged, writeErrors, held, heldDropped              *prometheus.Desc
}

// NewCollector returns a prometheus.Collector over d's Stats.
func NewCollector(d *Dispatcher) *Collector {
	wl := []string{"webhook"}
	return &Collector{
		d:           d,
		attempts:    prometheus.NewDesc("spanwatch_notify_attempts_total", "Delivery attempts, by webhook.", wl, nil),
		delivered:   prometheus.NewDesc("spanwatch_notify_delivered_total", "Notifications a webhook accepted (2xx).", wl, nil),
		failures:    prometheus.NewDesc("spanwatch_notify_failures_total", "Failed attempts and abandoned notifications, by webhook and reason.", []string{"webhook", "reason"}, nil),
		queue:       prometheus.NewDesc("spanwatch_notify_queue_depth", "Notifications waiting in the outbox for delivery.", wl, nil),
		pending:     prometheus.NewDesc("spanwatch_notify_pending_alerts", "Alerts held in aggregation groups.", wl, nil),
		oldest:      prometheus.NewDesc("spanwatch_notify_oldest_undelivered_seconds", "Age of the oldest accepted alert not yet delivered.", wl, nil),
		entries:     prometheus.NewDesc("spanwatch_notify_outbox_entries", "Alerts and notifications stored in the outbox.", nil, nil),
		maxEntries:  prometheus.NewDesc("spanwatch_notify_outbox_max_entries", "The outbox's bound (routing.outbox.max_entries).", nil, nil),
		overflow:    prometheus.NewDesc("spanwatch_notify_outbox_overflow_total", "Alerts refused and notifications postponed because the outbox was full.", nil, nil),
		damaged:     prometheus.NewDesc("spanwatch_notify_outbox_damaged", "1 when a damaged outbox was moved aside at start.", nil, nil),
		orphaned:    prometheus.NewDesc("spanwatch_notify_outbox_orphaned_entries", "Entries kept for webhooks no longer configured.", nil, nil),
		salvaged:    prometheus.NewDesc("spanwatch_notify_outbox_salvaged_records", "Records read back from a damaged outbox into the fresh one at start.", nil, nil),
		writeErrors: prometheus.NewDesc("spanwatch_notify_outbox_write_errors_total", "Outbox writes that failed (a full disk, an I/O error); each is retried with backoff.", nil, nil),
		held:        prometheus.NewDesc("spanwatch_notify_held_alerts", "Alerts held in memory until the outbox can be written.", nil, nil),
		heldDropped: prometheus.NewDesc("spanwatch_notify_held_dropped_total", "Alerts refused because the outbox could not be written and the hold was full.", nil, nil),
	}
}

// Describe implements prometheus.Collector.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.attempts, c.delivered, c.failures, c.queue, c.pending, c.oldest, c.entries, c.maxEntries, c.overflow, c.damaged, c.orphaned, c.salvaged, c.writeErrors, c.held, c.heldDropped} {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	s := c.d.Stats()
	for _, w := range s.Webhooks {
		ch <- prometheus.MustNewConstMetric(c.attempts, prometheus.CounterValue, float64(w.Attempts), w.Name)
		ch <- prometheus.MustNewConstMetric(c.delivered, prometheus.CounterValue, float64(w.Delivered), w.Name)
		for _, r := range reasons {
			ch <- prometheus.MustNewConstMetric(c.failures, prometheus.CounterValue, float64(w.Failures[r]), w.Name, r)
		}
		ch <- prometheus.MustNewConstMetric(c.queue, prometheus.GaugeValue, float64(w.QueueDepth), w.Name)
		ch <- prometheus.MustNewConstMetric(c.pending, prometheus.GaugeValue, float64(w.PendingAlerts), w.Name)
		ch <- prometheus.MustNewConstMetric(c.oldest, prometheus.GaugeValue, w.OldestUndelivered.Seconds(), w.Name)
	}
	ch <- prometheus.MustNewConstMetric(c.entries, prometheus.GaugeValue, float64(s.Outbox.Entries))
	ch <- prometheus.MustNewConstMetric(c.maxEntries, prometheus.GaugeValue, float64(s.Outbox.MaxEntries))
	ch <- prometheus.MustNewConstMetric(c.overflow, prometheus.CounterValue, float64(s.Outbox.Overflow))
	damaged := 0.0
	if s.Outbox.MovedAside != "" {
		damaged = 1
	}
	ch <- prometheus.MustNewConstMetric(c.damaged, prometheus.GaugeValue, damaged)
	ch <- prometheus.MustNewConstMetric(c.orphaned, prometheus.GaugeValue, float64(s.Outbox.Orphaned))
	ch <- prometheus.MustNewConstMetric(c.salvaged, prometheus.GaugeValue, float64(s.Outbox.Salvaged))
	ch <- prometheus.MustNewConstMetric(c.writeErrors, prometheus.CounterValue, float64(s.Outbox.WriteErrors))
	ch <- prometheus.MustNewConstMetric(c.held, prometheus.GaugeValue, float64(s.Outbox.Held))
	ch <- prometheus.MustNewConstMetric(c.heldDropped, prometheus.CounterValue, float64(s.Outbox.HeldDropped))
}
