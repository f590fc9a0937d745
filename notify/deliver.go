package notify

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/spanwatch/spanwatch/internal/crashpoint"
)

func (h *hook) signal() {
	select {
	case h.wake <- struct{}{}:
	default:
	}
}

func (h *hook) setLastErr(err error) {
	s := err.Error()
	h.lastErr.Store(&s)
}

// head returns the first queued notification of h after the key after
// (from the start when after is nil).
func (h *hook) head(after []byte) (key []byte, q *queued, err error) {
	err = h.d.db.View(func(tx *bolt.Tx) error {
		c := subRO(tx, bucketQueue, h.w.Name).Cursor()
		var k, v []byte
		if after == nil {
			k, v = c.First()
		} else if k, v = c.Seek(after); k != nil && bytes.Equal(k, after) {
			k, v = c.Next()
		}
		if k == nil {
			return nil
		}
		key = slices.Clone(k)
		q = new(queued)
		if err := json.Unmarshal(v, q); err != nil {
			// Keep the raw record as a dead letter rather than block the
			// queue behind it forever.
			q = &queued{Body: slices.Clone(v)}
			return &unreadableError{err}
		}
		return nil
	})
	return key, q, err
}

// unreadableError is a queued record that does not decode.
type unreadableError struct{ err error }

func (e *unreadableError) Error() string { return "queued notification unreadable: " + e.err.Error() }
func (e *unreadableError) Unwrap() error { return e.err }

// removeDelivered deletes delivered notifications, many in one
// transaction.
func (h *hook) removeDelivered(keys [][]byte, groups []string) error {
	err := h.d.db.Update(func(tx *bolt.Tx) error {
		b := subRO(tx, bucketQueue, h.w.Name)
		for _, k := range keys {
			if err := b.Delete(k); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	// Under d.mu, as every other change of the counters: Stats never sees
	// the queue shrunk and the outbox not.
	h.d.mu.Lock()
	h.queued.Add(-int64(len(keys)))
	h.d.entries.Add(-int64(len(keys)))
	for _, g := range groups {
		if h.inQueue[g]--; h.inQueue[g] <= 0 {
			delete(h.inQueue, g)
		}
	}
	h.d.mu.Unlock()
	return nil
}

// maxDeliveredBatch bounds the delivered notifications whose removal from
// the outbox is deferred and done in one transaction. After a crash, these
// are sent again (with the same idempotency keys).
const maxDeliveredBatch = 64

// remove deletes a queued notification; a dead one is kept in the dead
// letter bucket with why it failed.
func (h *hook) remove(key []byte, group string, dead *deadLetter) error {
	err := h.d.db.Update(func(tx *bolt.Tx) error {
		if err := subRO(tx, bucketQueue, h.w.Name).Delete(key); err != nil {
			return err
		}
		if dead == nil {
			return nil
		}
		db := subRO(tx, bucketDead, h.w.Name)
		seq, err := db.NextSequence()
		if err != nil {
			return err
		}
		v, err := json.Marshal(dead)
		if err != nil {
			return err
		}
		if err := db.Put(seqKey(seq), v); err != nil {
			return err
		}
		for db.Stats().KeyN > maxDeadLetters {
			k, _ := db.Cursor().First()
			if err := db.Delete(k); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	h.d.mu.Lock()
	h.queued.Add(-1)
	h.d.entries.Add(-1)
	if h.inQueue[group]--; h.inQueue[group] <= 0 {
		delete(h.inQueue, group)
	}
	h.d.mu.Unlock()
	return nil
}

// deliveryState is where a webhook's delivery stands with the head of
// its queue: the attempts made at it, the last error, and when the next
// attempt may be. It belongs to the webhook, not to its worker: a reload
// that keeps the webhook (same name, same destination) hands it to the new
// worker, which resumes the backoff instead of starting it again. Only the
// worker touches it; a reload reads it after the worker stopped.
type deliveryState struct {
	head       []byte // the key of the notification the attempts were at
	attempt    int    // attempts at head
	headErr    string // the last error of head
	notBefore  time.Time
	lastLogged string // the kind of the last error logged
}

// deliver sends h's queued notifications one at a time, in order, until
// ctx ends. Delivered notifications leave the outbox in batches: when the
// queue has no more to send, before a retry's wait, every 64, and on exit.
func (h *hook) deliver(ctx context.Context) {
	d, w := h.d, h.w
	ds := &h.ds
	var last []byte // the key last sent or removed; the next one follows it
	var done [][]byte
	var doneGroups []string
	removeDone := func() {
		if len(done) == 0 {
			return
		}
		if err := h.removeDelivered(done, doneGroups); err != nil {
			// They stay in the outbox: sent again after a restart.
			d.logger.Error("outbox_write_after_delivery_failed", "webhook", w.Name, "notifications", len(done), "err", err)
			return
		}
		done, doneGroups = done[:0], doneGroups[:0]
	}
	defer removeDone()
	sleep := func(t time.Duration) bool {
		tm := time.NewTimer(t)
		defer tm.Stop()
		select {
		case <-ctx.Done():
			return false
		case <-tm.C:
			return true
		}
	}
	// Writes after a failed attempt (dead letters) are retried with the
	// same backoff as deliveries, from min_backoff.
	writeFails := 0
	writeFailed := func(err error) bool {
		writeFails++
		h.setLastErr(err)
		wait := backoff(w.MinBackoff.D(), w.MaxBackoff.D(), writeFails)
		d.logger.Error("outbox_write_failed", "webhook", w.Name, "retry_in", wait.Round(time.Millisecond), "err", err)
		return sleep(wait)
	}
	for ctx.Err() == nil {
		key, q, err := h.head(last)
		var ue *unreadableError
		if errors.As(err, &ue) {
			h.setLastErr(err)
			d.logger.Error("queued_notification_unreadable_dead_lettered", "webhook", w.Name, "key", fmt.Sprintf("%x", key), "err", err)
			if err := h.remove(key, q.Group, &deadLetter{queued: *q, Reason: ReasonRender, Error: err.Error(), At: time.Now()}); err != nil {
				writeFailed(err)
				continue
			}
			writeFails = 0
			last = key
			continue
		}
		if err != nil {
			h.setLastErr(err)
			d.logger.Error("outbox_read_failed", "webhook", w.Name, "err", err)
			if !sleep(time.Second) {
				return
			}
			continue
		}
		if q == nil {
			removeDone()
			select {
			case <-ctx.Done():
				return
			case <-h.wake:
			}
			continue
		}
		if !bytes.Equal(key, ds.head) {
			*ds = deliveryState{head: key, lastLogged: ds.lastLogged}
		}
		now := time.Now()
		if wait := ds.notBefore.Sub(now); wait > 0 {
			// A retry whose wait a reload interrupted: the rest of it.
			removeDone()
			if !sleep(wait) {
				return
			}
			continue
		}
		if (w.MaxAge > 0 && now.Sub(q.Created) > w.MaxAge.D()) || (w.MaxAttempts > 0 && ds.attempt >= w.MaxAttempts) {
			msg := fmt.Sprintf("given up after %d attempts over %s", ds.attempt, now.Sub(q.Created).Round(time.Millisecond))
			if ds.headErr != "" {
				msg += ": last error: " + ds.headErr
			}
			d.logger.Error("notification_expired_dead_lettered", "webhook", w.Name, "group", q.Group, "alerts", q.Alerts, "err", msg)
			if err := h.remove(key, q.Group, &deadLetter{queued: *q, Reason: ReasonExpired, Error: msg, At: now}); err != nil {
				writeFailed(err)
				continue
			}
			writeFails = 0
			h.failures[ReasonExpired].Add(1)
			*ds = deliveryState{lastLogged: ds.lastLogged}
			last = key
			continue
		}
		ds.attempt++
		h.attempts.Add(1)
		// An attempt under way when Close is called is allowed to finish
		// (it is bounded by the webhook's timeout): aborting it could
		// deliver the notification without spanwatch knowing, and send it
		// again after the restart.
		r := h.s.send(context.WithoutCancel(ctx), q.Body, q.ID, now)
		if r.Err == nil {
			// Counted before the queue shrinks, so that a reader who sees
			// an empty queue also sees the count.
			h.delivered.Add(1)
			crashpoint.Hit("delivery")
			done, doneGroups, last = append(done, key), append(doneGroups, q.Group), key
			if len(done) >= maxDeliveredBatch {
				removeDone()
			}
			if ds.lastLogged != "" {
				d.logger.Info("webhook_delivering_again", "webhook", w.Name, "attempts", ds.attempt)
			}
			*ds = deliveryState{}
			if ctx.Err() != nil {
				return
			}
			continue
		}
		removeDone()
		h.failures[r.Reason].Add(1)
		h.setLastErr(r.Err)
		ds.headErr = r.Err.Error()
		if !r.Retry {
			d.logger.Error("notification_rejected_dead_lettered", "webhook", w.Name, "group", q.Group, "alerts", q.Alerts, "reason", r.Reason, "err", r.Err)
			if err := h.remove(key, q.Group, &deadLetter{queued: *q, Reason: r.Reason, Error: r.Err.Error(), At: now}); err != nil {
				// Stays at the head: the next pass dead-letters it again.
				ds.attempt--
				writeFailed(err)
				continue
			}
			writeFails = 0
			*ds = deliveryState{lastLogged: ds.lastLogged}
			last = key
			continue
		}
		wait := backoff(w.MinBackoff.D(), w.MaxBackoff.D(), ds.attempt)
		if r.RetryAfter > 0 {
			wait = min(r.RetryAfter, maxRetryAfter)
		}
		ds.notBefore = now.Add(wait)
		// Warn when the kind of error changes, not at every attempt (the
		// text of a connection error changes with each local port).
		if s := fmt.Sprint(r.Reason, r.StatusCode); s != ds.lastLogged {
			d.logger.Warn("delivery_failed_retrying", "webhook", w.Name, "reason", r.Reason, "attempt", ds.attempt, "retry_in", wait.Round(time.Millisecond), "err", r.Err)
			ds.lastLogged = s
		}
		if ctx.Err() != nil {
			return // shutting down: the notification stays queued
		}
		if !sleep(wait) {
			return
		}
	}
}

// maxRetryAfter caps a receiver's Retry-After.
const maxRetryAfter = time.Hour

// backoff returns the wait before attempt n+1: minB doubled n-1 times,
// capped at maxB, with "equal jitter" (a random half), so many spanwatch
// agents behind one outage do not retry in step.
func backoff(minB, maxB time.Duration, n int) time.Duration {
	d := minB
	for i := 1; i < n && d < maxB; i++ {
		d *= 2
	}
	d = min(d, maxB)
	half := d / 2
	return half + rand.N(half+1)
}
