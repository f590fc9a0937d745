package notify

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"maps"
	"math"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/spanwatch/spanwatch/alert"
)

// matches reports whether a has the label values of the webhook's match.
func (h *hook) matches(a *alert.Alert) bool {
	for k, v := range h.w.Match {
		if a.Labels[k] != v {
			return false
		}
	}
	return true
}

// groupKey returns the key of the group a belongs to and its group labels.
func (h *hook) groupKey(a *alert.Alert) (string, map[string]string) {
	labels := map[string]string{}
	if len(h.w.GroupBy) == 1 && h.w.GroupBy[0] == "..." {
		maps.Copy(labels, a.Labels)
	} else {
		for _, l := range h.w.GroupBy {
			if v, ok := a.Labels[l]; ok {
				labels[l] = v
			}
		}
	}
	keys := slices.Sorted(maps.Keys(labels))
	var b strings.Builder
	b.WriteString(h.w.Name)
	b.WriteString(":{")
	for i, k := range keys {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(k)
		b.WriteByte('=')
		b.WriteString(strconv.Quote(labels[k]))
	}
	b.WriteByte('}')
	return b.String(), labels
}

// initialWait is how long a group that has not notified yet waits: its
// group_wait, or nothing when one of its alerts started more than
// group_wait ago.
func (h *hook) initialWait(g *group, now time.Time) time.Duration {
	gw := h.w.GroupWait.D()
	for _, sa := range g.alerts {
		if s := sa.Alert.StartsAt; !s.IsZero() && s.Add(gw).Before(now) {
			return 0
		}
	}
	return gw
}

// newGroup creates and registers a group. Called with d.mu held.
func (h *hook) newGroup(key string, labels map[string]string) *group {
	h.nextSeq++
	g := &group{key: key, labels: labels, alerts: map[string]*storedAlert{}, seq: h.nextSeq}
	h.groups[key] = g
	return g
}

// schedule (re)arms g's timer. Called with d.mu held.
func (h *hook) schedule(g *group, wait time.Duration) {
	if g.timer != nil {
		g.timer.Stop()
	}
	g.at = time.Now().Add(wait)
	g.timer = time.AfterFunc(wait, func() { h.tick(g) })
}

// tick marks g due and wakes the webhook's flusher, which flushes every
// due group together.
func (h *hook) tick(g *group) {
	d := h.d
	d.mu.Lock()
	if d.closed || h.groups[g.key] != g {
		d.mu.Unlock()
		return
	}
	h.due[g] = true
	d.mu.Unlock()
	select {
	case h.kick <- struct{}{}:
	default:
	}
}

// flusher flushes due groups until ctx ends, then re-arms their timers for
// the next group_interval.
func (h *hook) flusher(ctx context.Context) {
	d := h.d
	for {
		select {
		case <-ctx.Done():
			return
		case <-h.kick:
		}
		d.mu.Lock()
		if d.closed {
			d.mu.Unlock()
			return
		}
		groups := make([]*group, 0, len(h.due))
		for g := range h.due {
			if h.groups[g.key] == g {
				groups = append(groups, g)
			}
		}
		clear(h.due)
		// Oldest group first, so the queue keeps the order groups came in.
		sort.Slice(groups, func(i, j int) bool { return groups[i].seq < groups[j].seq })
		next := h.w.GroupInterval.D()
		if err := h.flushLocked(groups, time.Now()); err != nil {
			// A full disk: try again with backoff, not a group_interval
			// later.
			h.flushFails++
			next = min(next, backoff(100*time.Millisecond, 30*time.Second, h.flushFails))
		} else {
			h.flushFails = 0
		}
		for _, g := range groups {
			if h.groups[g.key] == g {
				h.schedule(g, next)
			}
		}
		d.mu.Unlock()
	}
}

func identity(a *alert.Alert) string {
	return fingerprint(a) + "@" + strconv.FormatInt(a.StartsAt.UnixNano(), 10)
}

// needsUpdate decides whether a group must notify, with Alertmanager's
// rules: on new firing alerts; when all alerts resolved after some fired;
// on new resolved alerts if resolved ones are sent; otherwise once
// repeat_interval has passed.
func needsUpdate(last *nflogEntry, firing, resolved []string, sendResolved bool, repeat time.Duration, now time.Time) bool {
	if last == nil {
		return len(firing) > 0
	}
	if !subset(firing, last.Firing) {
		return true
	}
	if len(firing) == 0 {
		return len(last.Firing) > 0
	}
	if sendResolved && !subset(resolved, last.Resolved) {
		return true
	}
	return !last.At.After(now.Add(-repeat))
}

// subset reports whether every element of a is in b (b sorted).
func subset(a, b []string) bool {
	for _, x := range a {
		if _, ok := slices.BinarySearch(b, x); !ok {
			return false
		}
	}
	return true
}

// flushPlan is what flushing one group will do, decided before the outbox
// transaction that does it.
type flushPlan struct {
	g      *group
	update bool        // a notification is due (the nflog entry changes)
	entry  *nflogEntry // the new nflog entry, when update
	q      *queued     // the notification to queue, if any
	drop   []string    // fingerprints of resolved alerts leaving the group
	empty  bool        // the group is left empty and goes away
	net    int64       // change in outbox entries
}

// plan decides what flushing g now does; nil when nothing. Called with
// d.mu held.
func (h *hook) plan(g *group, now time.Time) *flushPlan {
	d, w := h.d, h.w
	g.flushed = true
	all := make([]*storedAlert, 0, len(g.alerts))
	for _, sa := range g.alerts {
		// Alertmanager's rule: an alert whose endsAt has passed is
		// resolved. Overrun alerts end that way, without a resolved
		// notification of their own. (sa.Alert is the dispatcher's copy.)
		if a := sa.Alert; a.State != alert.StateResolved && !a.EndsAt.IsZero() && !a.EndsAt.After(now) {
			a.State = alert.StateResolved
		}
		all = append(all, sa)
	}
	sort.Slice(all, func(i, j int) bool {
		a, b := all[i].Alert, all[j].Alert
		if !a.StartsAt.Equal(b.StartsAt) {
			return a.StartsAt.Before(b.StartsAt)
		}
		return a.Fingerprint < b.Fingerprint
	})
	var firing, resolved []string
	for _, sa := range all {
		if sa.Alert.Resolved() {
			resolved = append(resolved, identity(sa.Alert))
		} else {
			firing = append(firing, identity(sa.Alert))
		}
	}
	sort.Strings(firing)
	sort.Strings(resolved)
	sendResolved := w.SendResolved || w.Format == FormatAlertmanagerAPI
	p := &flushPlan{g: g, update: needsUpdate(g.last, firing, resolved, sendResolved, w.RepeatInterval.D(), now)}
	// A repeat (nothing changed) is not queued behind a notification of the
	// same group that still waits for the receiver: after an outage the
	// receiver gets one repeat, not one per repeat_interval of the outage.
	if p.update && h.inQueue[g.key] > 0 && !needsUpdate(g.last, firing, resolved, sendResolved, math.MaxInt64, now) {
		p.update = false
	}
	if p.update {
		p.entry = &nflogEntry{Firing: firing, Resolved: resolved, At: now}
		var send []*alert.Alert
		oldest := time.Time{}
		for _, sa := range all {
			if sa.Alert.Resolved() && !sendResolved {
				continue
			}
			send = append(send, sa.Alert)
			if oldest.IsZero() || sa.Accepted.Before(oldest) {
				oldest = sa.Accepted
			}
		}
		if len(send) > 0 {
			msg := buildMessage(w, d.cfg.Routing.ExternalURL, g.key, g.labels, send)
			body, err := render(w, h.tmpl, msg, send, now)
			if err != nil {
				h.failures[ReasonRender].Add(1)
				h.setLastErr(err)
				d.logger.Error("notification_not_rendered_dropped", "webhook", w.Name, "group", g.key, "error", err)
			} else {
				p.q = &queued{ID: idempotencyKey(w.Name, g.key, send, now), Group: g.key, Created: now, Oldest: oldest, Alerts: len(send), Body: body}
				p.net++
			}
		}
	}
	// Resolved alerts leave the group now: this notification covers them,
	// or (like Alertmanager) no receiver needs to hear of them: resolved
	// ones are not sent, or they resolved before anyone heard they fired.
	for fp, sa := range g.alerts {
		if sa.Alert.Resolved() {
			p.drop = append(p.drop, fp)
		}
	}
	if !p.update && len(p.drop) == 0 {
		return nil
	}
	p.empty = len(p.drop) == len(g.alerts)
	p.net -= int64(len(p.drop))
	return p
}

// flushLocked sends the notifications that groups are due, queuing them
// all in one outbox transaction (one fsync however many groups are due at
// once). Called with d.mu held. The error is a failed outbox write:
// nothing changed, the caller tries again.
func (h *hook) flushLocked(groups []*group, now time.Time) error {
	d, w := h.d, h.w
	var plans []*flushPlan
	var net int64
	for _, g := range groups {
		p := h.plan(g, now)
		if p == nil {
			continue
		}
		if p.net > 0 && d.entries.Load()+net+p.net > int64(d.maxEntries) {
			d.overflow.Add(1)
			err := fmt.Errorf("%w: notification for group %s postponed to the next group_interval", ErrOutboxFull, g.key)
			h.setLastErr(err)
			d.logger.Error("outbox_full_notification_postponed", "webhook", w.Name, "group", g.key, "max_entries", d.maxEntries)
			continue
		}
		net += p.net
		plans = append(plans, p)
	}
	if len(plans) == 0 {
		return nil
	}
	err := d.db.Update(func(tx *bolt.Tx) error {
		qb, ab, nb := subRO(tx, bucketQueue, w.Name), subRO(tx, bucketAlerts, w.Name), subRO(tx, bucketNflog, w.Name)
		for _, p := range plans {
			if p.q != nil {
				seq, err := qb.NextSequence()
				if err != nil {
					return err
				}
				v, err := json.Marshal(p.q)
				if err != nil {
					return err
				}
				if err := qb.Put(seqKey(seq), v); err != nil {
					return err
				}
			}
			for _, fp := range p.drop {
				if err := ab.Delete([]byte(p.g.key + "\x00" + fp)); err != nil {
					return err
				}
			}
			switch {
			case p.empty:
				if err := nb.Delete([]byte(p.g.key)); err != nil {
					return err
				}
			case p.update:
				v, err := json.Marshal(p.entry)
				if err != nil {
					return err
				}
				if err := nb.Put([]byte(p.g.key), v); err != nil {
					return err
				}
			}
		}
		return writeFault()
	})
	if err != nil {
		d.writeErrors.Add(1)
		h.setLastErr(err)
		if h.flushFails == 0 {
			d.logger.Error("outbox_write_failed_notifications_retried", "webhook", w.Name, "groups", len(plans), "error", err)
		}
		return err
	}
	d.entries.Add(net)
	queuedN := 0
	for _, p := range plans {
		g := p.g
		for _, fp := range p.drop {
			delete(g.alerts, fp)
		}
		if p.update {
			g.last = p.entry
		}
		if p.empty {
			if g.timer != nil {
				g.timer.Stop()
			}
			delete(h.groups, g.key)
		}
		if p.q != nil {
			queuedN++
			h.inQueue[g.key]++
		}
	}
	if queuedN > 0 {
		h.queued.Add(int64(queuedN))
		h.signal()
	}
	return nil
}

// idempotencyKey identifies one notification: the same across its
// retries (and restarts), different for any other notification. It hashes
// the webhook, the group, each alert's fingerprint, startsAt and status,
// and when the notification was made.
func idempotencyKey(webhook, groupKey string, alerts []*alert.Alert, now time.Time) string {
	h := sha256.New()
	fmt.Fprintf(h, "%s\x00%s\x00%d\x00", webhook, groupKey, now.UnixNano())
	for _, a := range alerts {
		fmt.Fprintf(h, "%s:%s\x00", identity(a), status(a))
	}
	return hex.EncodeToString(h.Sum(nil)[:16])
}

func seqKey(seq uint64) []byte { return binary.BigEndian.AppendUint64(nil, seq) }
