package notify

import (
	"encoding/json"
	"time"

	bolt "go.etcd.io/bbolt"
)

// Stats is a snapshot of the Dispatcher's own health.
type Stats struct {
	Outbox   OutboxStats
	Webhooks []WebhookStats
}

// OutboxStats describes the outbox file.
type OutboxStats struct {
	Path string
	// Entries counts stored alerts plus queued notifications; MaxEntries
	// bounds it.
	Entries    int
	MaxEntries int
	// Overflow counts alerts refused and notifications postponed because
	// the outbox was full.
	Overflow uint64
	// MovedAside names the copy of a damaged outbox found at start, and
	// Damage says what was wrong with it; both empty when the outbox was
	// sound.
	MovedAside string
	Damage     string
	// Salvaged counts the records (alerts, notification log entries,
	// queued notifications, dead letters) read back from the damaged
	// outbox into the fresh one; Unreadable those found but not readable.
	// What lay on pages that could not be read is in the copy only.
	Salvaged   int
	Unreadable int
	// WriteErrors counts outbox writes that failed (a full disk, an I/O
	// error); each is retried. Held is how many alerts wait in memory for
	// the outbox to take them, and HeldDropped counts alerts refused
	// because MaxHeld were held already.
	WriteErrors uint64
	Held        int
	HeldDropped uint64
	// Orphaned counts entries kept in the outbox for webhooks that are no
	// longer configured; they are delivered if the webhook comes back.
	Orphaned int
}

// WebhookStats describes delivery to one webhook.
type WebhookStats struct {
	Name      string
	Attempts  uint64
	Delivered uint64
	// Failures counts failed attempts and abandoned notifications by
	// reason (Reason... constants).
	Failures map[string]uint64
	// QueueDepth counts notifications waiting for delivery.
	QueueDepth int
	// PendingAlerts counts alerts held in aggregation groups.
	PendingAlerts int
	// OldestUndelivered is the age of the oldest alert accepted but not yet
	// delivered (queued, or waiting in a group for its first
	// notification); 0 when there is none.
	OldestUndelivered time.Duration
	LastError         string
}

// Stats returns the Dispatcher's counters and queue state.
func (d *Dispatcher) Stats() Stats {
	now := time.Now()
	// The counters are read under d.mu, where they change together (an
	// entry and the queue depth of its webhook): one consistent picture.
	d.mu.Lock()
	defer d.mu.Unlock()
	s := Stats{Outbox: OutboxStats{
		Path:       d.cfg.Routing.Outbox.Path,
		Entries:    int(d.entries.Load()),
		MaxEntries: d.maxEntries,
		Overflow:   d.overflow.Load(),
		MovedAside: d.corrupt,
		Damage:     d.corruptErr,
		Salvaged:   d.salvaged,
		Unreadable: d.unreadable,
		Orphaned:   d.orphans,

		WriteErrors: d.writeErrors.Load(),
		HeldDropped: d.heldDropped.Load(),
	}}
	s.Outbox.Held = len(d.held)
	for _, h := range d.hooks {
		ws := WebhookStats{
			Name:       h.w.Name,
			Attempts:   h.attempts.Load(),
			Delivered:  h.delivered.Load(),
			Failures:   map[string]uint64{},
			QueueDepth: int(h.queued.Load()),
		}
		for r, c := range h.failures {
			ws.Failures[r] = c.Load()
		}
		if p := h.lastErr.Load(); p != nil {
			ws.LastError = *p
		}
		var oldest time.Time
		for _, g := range h.groups {
			ws.PendingAlerts += len(g.alerts)
			for _, sa := range g.alerts {
				if g.last != nil && notified(g.last, sa) {
					continue
				}
				if oldest.IsZero() || sa.Accepted.Before(oldest) {
					oldest = sa.Accepted
				}
			}
		}
		if !d.closed {
			d.db.View(func(tx *bolt.Tx) error {
				if b := subRO(tx, bucketQueue, h.w.Name); b != nil {
					if _, v := b.Cursor().First(); v != nil {
						var q queued
						if json.Unmarshal(v, &q) == nil && (oldest.IsZero() || q.Oldest.Before(oldest)) {
							oldest = q.Oldest
						}
					}
				}
				return nil
			})
		}
		if !oldest.IsZero() {
			ws.OldestUndelivered = max(0, now.Sub(oldest))
		}
		s.Webhooks = append(s.Webhooks, ws)
	}
	return s
}

// notified reports whether the last notification already covered sa in its
// current state.
func notified(e *nflogEntry, sa *storedAlert) bool {
	list := e.Firing
	if sa.Alert.Resolved() {
		list = e.Resolved
	}
	return subset([]string{identity(sa.Alert)}, list)
}
