package notify

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"math/rand/v2"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"text/template"
	"time"

	"github.com/spanwatch/spanwatch/alert"
	bolt "go.etcd.io/bbolt"
)

// Errors returned by Notify.
var (
	// ErrOutboxFull means the outbox holds max_entries already; the alerts
	// named in the error were refused and counted as overflow.
	ErrOutboxFull = errors.New("outbox full")
	// ErrClosed means the Dispatcher was closed.
	ErrClosed = errors.New("dispatcher closed")
)

// Options are the parts of a Dispatcher that do not come from the
// configuration file.
type Options struct {
	// Logger receives delivery failures and outbox recovery; nil discards.
	Logger *slog.Logger
}

// A Dispatcher groups alerts and delivers them to every configured webhook,
// through a durable outbox. It implements alert.Notifier. Create it with
// New and Close it when done.
type Dispatcher struct {
	cfg    *Config
	logger *slog.Logger
	db     *bolt.DB

	maxEntries int
	entries    atomic.Int64 // stored alerts + queued notifications
	overflow   atomic.Uint64
	corrupt    string // where a damaged outbox was moved, if one was
	corruptErr string
	orphans    int // entries kept for webhooks no longer configured

	mu     sync.Mutex // guards hooks' groups, closed and all outbox writes of alerts/nflog
	hooks  []*hook
	closed bool

	life      sync.Mutex // serializes Reload and Close
	ctx       context.Context
	cancel    context.CancelFunc
	wg        sync.WaitGroup
	closeOnce sync.Once
	closeErr  error
}

var _ alert.Notifier = (*Dispatcher)(nil)

// hook is one webhook's state: its aggregation groups and its delivery
// worker.
type hook struct {
	d       *Dispatcher
	w       *Webhook
	s       *sender
	tmpl    *template.Template
	groups  map[string]*group
	wake    chan struct{}   // a notification was queued
	due     map[*group]bool // groups whose timer fired; guarded by d.mu
	kick    chan struct{}   // wakes the flusher
	nextSeq uint64          // numbers groups in order of creation; guarded by d.mu

	attempts  atomic.Uint64
	delivered atomic.Uint64
	failures  map[string]*atomic.Uint64 // fixed set of reasons
	queued    atomic.Int64
	lastErr   atomic.Pointer[string]
}

var reasons = []string{ReasonTimeout, ReasonConnection, ReasonHTTP5xx, ReasonHTTP429, ReasonHTTP4xx, ReasonCredentials, ReasonRender, ReasonExpired}

// group is an aggregation group: the alerts of one webhook that share the
// values of its group_by labels.
type group struct {
	key     string
	labels  map[string]string
	alerts  map[string]*storedAlert // by fingerprint
	timer   *time.Timer
	flushed bool        // the first notification (after group_wait) happened
	last    *nflogEntry // the last notification, nil before the first
	seq     uint64      // order of creation within the webhook
}

type storedAlert struct {
	Alert *alert.Alert `json:"alert"`
	// Accepted is when Notify first saw this alert in this state.
	Accepted time.Time `json:"accepted"`
}

// nflogEntry records what the last notification of a group said, which
// decides whether the next tick needs one (Alertmanager's notification log).
type nflogEntry struct {
	Firing   []string  `json:"firing"`
	Resolved []string  `json:"resolved"`
	At       time.Time `json:"at"`
}

// queued is a rendered notification waiting for delivery.
type queued struct {
	ID      string    `json:"id"` // the idempotency key
	Group   string    `json:"group"`
	Created time.Time `json:"created"`
	Oldest  time.Time `json:"oldest"` // when its oldest alert was accepted
	Alerts  int       `json:"alerts"`
	Body    []byte    `json:"body"`
}

type deadLetter struct {
	queued
	Reason string    `json:"reason"`
	Error  string    `json:"error"`
	At     time.Time `json:"at"`
}

// New opens the outbox named in cfg, restores the groups and queued
// notifications a previous run left there, and starts delivering. A damaged
// outbox is moved aside and reported (logged, and in Stats), and a fresh one
// is used: alert delivery keeps working.
func New(cfg *Config, opts Options) (*Dispatcher, error) {
	logger := opts.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	d := &Dispatcher{cfg: cfg, logger: logger, maxEntries: cfg.Routing.Outbox.MaxEntries}
	if d.maxEntries <= 0 {
		d.maxEntries = DefaultOutboxMaxEntries
	}
	hooks, err := d.newHooks(cfg)
	if err != nil {
		return nil, err
	}
	d.hooks = hooks
	db, movedTo, cause, err := openOutbox(cfg.Routing.Outbox.Path)
	if err != nil {
		return nil, err
	}
	d.db = db
	if movedTo != "" {
		d.corrupt, d.corruptErr = movedTo, cause.Error()
		logger.Error("outbox damaged: moved aside, started a fresh one; alerts in the old file were not delivered",
			"path", cfg.Routing.Outbox.Path, "moved_to", movedTo, "err", cause)
	}
	d.mu.Lock()
	err = d.restoreLocked()
	d.mu.Unlock()
	if err != nil {
		db.Close()
		return nil, err
	}
	d.start()
	return d, nil
}

// newHooks builds the state of each webhook of cfg.
func (d *Dispatcher) newHooks(cfg *Config) ([]*hook, error) {
	var hooks []*hook
	for i := range cfg.Webhooks {
		w := &cfg.Webhooks[i]
		s, err := newSender(w)
		if err != nil {
			return nil, err
		}
		h := &hook{d: d, w: w, s: s, groups: map[string]*group{}, wake: make(chan struct{}, 1),
			due: map[*group]bool{}, kick: make(chan struct{}, 1), failures: map[string]*atomic.Uint64{}}
		for _, r := range reasons {
			h.failures[r] = new(atomic.Uint64)
		}
		if w.TLS != nil && w.TLS.InsecureSkipVerify {
			d.logger.Warn("webhook does not verify the server's TLS certificate (insecure_skip_verify)", "webhook", w.Name)
		}
		if w.Format == FormatTemplate {
			if h.tmpl, err = parseTemplate(w.Name, w.Template); err != nil {
				return nil, fmt.Errorf("webhook %s: %w", w.Name, err)
			}
		}
		hooks = append(hooks, h)
	}
	return hooks, nil
}

// start runs each webhook's flusher and delivery worker.
func (d *Dispatcher) start() {
	d.ctx, d.cancel = context.WithCancel(context.Background())
	for _, h := range d.hooks {
		d.wg.Add(2)
		go func() {
			defer d.wg.Done()
			h.deliver(d.ctx)
		}()
		go func() {
			defer d.wg.Done()
			h.flusher(d.ctx)
		}()
	}
}

// stop stops the timers and workers; an attempt under way finishes.
func (d *Dispatcher) stop() {
	d.mu.Lock()
	for _, h := range d.hooks {
		for _, g := range h.groups {
			if g.timer != nil {
				g.timer.Stop()
			}
		}
	}
	d.mu.Unlock()
	d.cancel()
	d.wg.Wait()
}

// Reload applies a changed configuration without losing anything, as a
// restart on the same outbox would: it stops delivery (an attempt under way
// finishes), swaps the webhooks, regroups the stored alerts under the new
// group_by and match, reports entries of removed webhooks (kept), and
// resumes. Counters carry over for webhooks that keep their name. The
// outbox path cannot change without a restart. When cfg is rejected, the
// running configuration stays.
func (d *Dispatcher) Reload(cfg *Config) error {
	if cfg.Routing.Outbox.Path != d.cfg.Routing.Outbox.Path {
		return fmt.Errorf("reload: outbox path changed from %s to %s: restart spanwatch to move it", d.cfg.Routing.Outbox.Path, cfg.Routing.Outbox.Path)
	}
	hooks, err := d.newHooks(cfg)
	if err != nil {
		return fmt.Errorf("reload: %w", err)
	}
	d.life.Lock()
	defer d.life.Unlock()
	d.mu.Lock()
	closed := d.closed
	d.mu.Unlock()
	if closed {
		return ErrClosed
	}
	d.stop()
	d.mu.Lock()
	for _, nh := range hooks {
		for _, oh := range d.hooks {
			if oh.w.Name == nh.w.Name {
				nh.attempts.Store(oh.attempts.Load())
				nh.delivered.Store(oh.delivered.Load())
				for r, c := range oh.failures {
					nh.failures[r].Store(c.Load())
				}
				nh.lastErr.Store(oh.lastErr.Load())
			}
		}
	}
	d.cfg, d.hooks, d.orphans = cfg, hooks, 0
	if cfg.Routing.Outbox.MaxEntries > 0 {
		d.maxEntries = cfg.Routing.Outbox.MaxEntries
	}
	err = d.restoreLocked()
	d.mu.Unlock()
	d.start()
	if err != nil {
		return fmt.Errorf("reload: %w", err)
	}
	return nil
}

// restoreLocked loads the alerts, notification log and queue depth left in
// the outbox, and schedules each group. Called with d.mu held.
func (d *Dispatcher) restoreLocked() error {
	now := time.Now()
	var total int64
	err := d.db.Update(func(tx *bolt.Tx) error {
		for _, h := range d.hooks {
			ab, err := sub(tx, bucketAlerts, h.w.Name)
			if err != nil {
				return err
			}
			if _, err := sub(tx, bucketNflog, h.w.Name); err != nil {
				return err
			}
			qb, err := sub(tx, bucketQueue, h.w.Name)
			if err != nil {
				return err
			}
			if _, err := sub(tx, bucketDead, h.w.Name); err != nil {
				return err
			}
			// Alerts are regrouped with the current group_by, and those
			// the webhook no longer matches leave it: the configuration
			// may have changed since they were stored.
			type move struct {
				old, new []byte
				v        []byte
			}
			var moves []move
			err = ab.ForEach(func(k, v []byte) error {
				gk, _, _ := strings.Cut(string(k), "\x00")
				var sa storedAlert
				if err := json.Unmarshal(v, &sa); err != nil || sa.Alert == nil {
					total++
					d.logger.Error("outbox record unreadable: kept, not delivered", "webhook", h.w.Name, "key", string(k), "err", err)
					return nil
				}
				fp := fingerprint(sa.Alert)
				if !h.matches(sa.Alert) {
					d.logger.Warn("stored alert no longer matches the webhook: removed", "webhook", h.w.Name, "alert", sa.Alert.Name(), "fingerprint", fp)
					moves = append(moves, move{old: slices.Clone(k)})
					return nil
				}
				total++
				newKey, labels := h.groupKey(sa.Alert)
				if newKey != gk {
					moves = append(moves, move{old: slices.Clone(k), new: []byte(newKey + "\x00" + fp), v: slices.Clone(v)})
				}
				g := h.groups[newKey]
				if g == nil {
					g = h.newGroup(newKey, labels)
				}
				g.alerts[fp] = &sa
				return nil
			})
			if err != nil {
				return err
			}
			for _, m := range moves {
				if err := ab.Delete(m.old); err != nil {
					return err
				}
				if m.new != nil {
					if err := ab.Put(m.new, m.v); err != nil {
						return err
					}
				}
			}
			nb := subRO(tx, bucketNflog, h.w.Name)
			var stale [][]byte
			nb.ForEach(func(k, v []byte) error {
				g := h.groups[string(k)]
				if g == nil {
					stale = append(stale, slices.Clone(k))
					return nil
				}
				var e nflogEntry
				if json.Unmarshal(v, &e) == nil {
					g.last, g.flushed = &e, true
				}
				return nil
			})
			for _, k := range stale {
				if err := nb.Delete(k); err != nil {
					return err
				}
			}
			n := qb.Stats().KeyN
			h.queued.Store(int64(n))
			total += int64(n)
		}
		d.reportOrphans(tx)
		return nil
	})
	if err != nil {
		return fmt.Errorf("restore outbox: %w", err)
	}
	d.entries.Store(total)
	for _, h := range d.hooks {
		for _, g := range h.groups {
			var wait time.Duration
			if g.flushed {
				wait = max(0, g.last.At.Add(h.w.GroupInterval.D()).Sub(now))
			} else {
				wait = h.initialWait(g, now)
			}
			h.schedule(g, wait)
		}
		if h.queued.Load() > 0 {
			h.signal()
		}
	}
	return nil
}

// reportOrphans logs what the outbox holds for webhooks that are no longer
// configured: kept (nothing is deleted), not delivered.
func (d *Dispatcher) reportOrphans(tx *bolt.Tx) {
	known := map[string]bool{}
	for _, h := range d.hooks {
		known[h.w.Name] = true
	}
	for _, top := range [][]byte{bucketAlerts, bucketQueue} {
		tx.Bucket(top).ForEachBucket(func(name []byte) error {
			if !known[string(name)] {
				if n := tx.Bucket(top).Bucket(name).Stats().KeyN; n > 0 {
					d.orphans += n
					d.logger.Warn("outbox holds entries for a webhook no longer configured: kept, not delivered",
						"webhook", string(name), "kind", string(top), "entries", n)
				}
			}
			return nil
		})
	}
}

// Notify accepts alerts for delivery: it returns once they are written to
// the outbox. Firing and resolved alerts are delivered; pending and inactive
// ones are ignored. retry is true when the caller should offer the same alerts
// again later (the outbox is full or could not be written).
func (d *Dispatcher) Notify(ctx context.Context, alerts ...*alert.Alert) (retry bool, err error) {
	if err := ctx.Err(); err != nil {
		return true, err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return false, ErrClosed
	}
	now := time.Now()
	type op struct {
		h      *hook
		gk     string
		labels map[string]string
		fp     string
		sa     *storedAlert
	}
	var ops []op
	var added int64
	refused := 0
	err = d.db.Update(func(tx *bolt.Tx) error {
		ops, added, refused = ops[:0], 0, 0
		for _, a := range alerts {
			// Pending and inactive alerts are not news for a receiver; an
			// alert without a state counts as firing.
			if a == nil || a.State == alert.StatePending || a.State == alert.StateInactive {
				continue
			}
			// A copy: the caller may reuse its alert and maps.
			ac := *a
			ac.Labels, ac.Annotations = maps.Clone(a.Labels), maps.Clone(a.Annotations)
			ac.Fingerprint = fingerprint(a)
			for _, h := range d.hooks {
				if !h.matches(&ac) {
					continue
				}
				gk, labels := h.groupKey(&ac)
				b := subRO(tx, bucketAlerts, h.w.Name)
				key := []byte(gk + "\x00" + ac.Fingerprint)
				sa := &storedAlert{Alert: &ac, Accepted: now}
				if old := b.Get(key); old != nil {
					var prev storedAlert
					if json.Unmarshal(old, &prev) == nil && prev.Alert != nil &&
						identity(prev.Alert) == identity(&ac) && prev.Alert.State == ac.State {
						sa.Accepted = prev.Accepted
					}
				} else {
					if d.entries.Load()+added >= int64(d.maxEntries) {
						refused++
						continue
					}
					added++
				}
				v, err := json.Marshal(sa)
				if err != nil {
					return fmt.Errorf("encode alert %s: %w", ac.Fingerprint, err)
				}
				if err := b.Put(key, v); err != nil {
					return err
				}
				ops = append(ops, op{h, gk, labels, ac.Fingerprint, sa})
			}
		}
		return nil
	})
	if err != nil {
		return true, fmt.Errorf("write outbox: %w", err)
	}
	d.entries.Add(added)
	for _, o := range ops {
		h := o.h
		g := h.groups[o.gk]
		if g == nil {
			g = h.newGroup(o.gk, o.labels)
			g.alerts[o.fp] = o.sa
			h.schedule(g, h.initialWait(g, now))
			continue
		}
		g.alerts[o.fp] = o.sa
		// Like Alertmanager: before the group's first notification, an
		// alert whose group_wait is already over (it started long ago)
		// makes the group flush at once.
		if !g.flushed && !o.sa.Alert.StartsAt.IsZero() && o.sa.Alert.StartsAt.Add(h.w.GroupWait.D()).Before(now) {
			h.schedule(g, 0)
		}
	}
	if refused > 0 {
		d.overflow.Add(uint64(refused))
		err := fmt.Errorf("%w: %d entries (max_entries): %d alert deliveries refused; raise routing.outbox.max_entries or fix the webhooks that do not accept alerts", ErrOutboxFull, d.maxEntries, refused)
		d.logger.Error("outbox full: alerts refused", "refused", refused, "max_entries", d.maxEntries)
		return true, err
	}
	return false, nil
}

// Flush makes every group send the notification it is due now, without
// waiting for group_wait or group_interval, and waits until every queue is
// empty or ctx ends.
func (d *Dispatcher) Flush(ctx context.Context) error {
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		return ErrClosed
	}
	for _, h := range d.hooks {
		groups := make([]*group, 0, len(h.groups))
		for _, g := range h.groups {
			groups = append(groups, g)
		}
		sort.Slice(groups, func(i, j int) bool { return groups[i].seq < groups[j].seq })
		h.flushLocked(groups, time.Now())
	}
	d.mu.Unlock()
	t := time.NewTicker(5 * time.Millisecond)
	defer t.Stop()
	for {
		pending := int64(0)
		d.mu.Lock()
		for _, h := range d.hooks {
			pending += h.queued.Load()
		}
		d.mu.Unlock()
		if pending == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("flush: %d notifications still queued: %w", pending, ctx.Err())
		case <-t.C:
		}
	}
}

// Close stops the timers and delivery workers and closes the outbox. A
// delivery attempt under way is allowed to finish, so Close may take up to
// the longest webhook timeout. Alerts and notifications not yet delivered
// stay in the outbox for the next run. Close is idempotent.
func (d *Dispatcher) Close() error {
	d.closeOnce.Do(func() {
		d.life.Lock()
		defer d.life.Unlock()
		d.mu.Lock()
		d.closed = true
		d.mu.Unlock()
		d.stop()
		d.closeErr = d.db.Close()
	})
	return d.closeErr
}

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
		h.flushLocked(groups, time.Now())
		for _, g := range groups {
			if h.groups[g.key] == g {
				h.schedule(g, h.w.GroupInterval.D())
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
				d.logger.Error("notification not rendered: dropped", "webhook", w.Name, "group", g.key, "err", err)
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
// once). Called with d.mu held.
func (h *hook) flushLocked(groups []*group, now time.Time) {
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
			d.logger.Error("outbox full: notification postponed", "webhook", w.Name, "group", g.key, "max_entries", d.maxEntries)
			continue
		}
		net += p.net
		plans = append(plans, p)
	}
	if len(plans) == 0 {
		return
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
		return nil
	})
	if err != nil {
		h.setLastErr(err)
		d.logger.Error("outbox write failed: notifications postponed", "webhook", w.Name, "groups", len(plans), "err", err)
		return
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
		}
	}
	if queuedN > 0 {
		h.queued.Add(int64(queuedN))
		h.signal()
	}
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

// head returns the first queued notification of h.
func (h *hook) head() (key []byte, q *queued, err error) {
	err = h.d.db.View(func(tx *bolt.Tx) error {
		b := subRO(tx, bucketQueue, h.w.Name)
		k, v := b.Cursor().First()
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

// remove deletes a queued notification; a dead one is kept in the dead
// letter bucket with why it failed.
func (h *hook) remove(key []byte, dead *deadLetter) error {
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
	h.queued.Add(-1)
	h.d.entries.Add(-1)
	return nil
}

// deliver sends h's queued notifications one at a time, in order, until
// ctx ends.
func (h *hook) deliver(ctx context.Context) {
	d, w := h.d, h.w
	attempt := 0
	var lastLogged string
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
	for ctx.Err() == nil {
		key, q, err := h.head()
		var ue *unreadableError
		if errors.As(err, &ue) {
			h.setLastErr(err)
			d.logger.Error("queued notification unreadable: moved to dead letters", "webhook", w.Name, "key", fmt.Sprintf("%x", key), "err", err)
			if err := h.remove(key, &deadLetter{queued: *q, Reason: ReasonRender, Error: err.Error(), At: time.Now()}); err != nil {
				d.logger.Error("outbox write failed", "webhook", w.Name, "err", err)
				sleep(time.Second)
			}
			continue
		}
		if err != nil {
			h.setLastErr(err)
			d.logger.Error("outbox read failed", "webhook", w.Name, "err", err)
			if !sleep(time.Second) {
				return
			}
			continue
		}
		if q == nil {
			select {
			case <-ctx.Done():
				return
			case <-h.wake:
			}
			continue
		}
		now := time.Now()
		if (w.MaxAge > 0 && now.Sub(q.Created) > w.MaxAge.D()) || (w.MaxAttempts > 0 && attempt >= w.MaxAttempts) {
			msg := fmt.Sprintf("given up after %d attempts over %s", attempt, now.Sub(q.Created).Round(time.Millisecond))
			if p := h.lastErr.Load(); p != nil {
				msg += ": last error: " + *p
			}
			d.logger.Error("notification expired: moved to dead letters", "webhook", w.Name, "group", q.Group, "alerts", q.Alerts, "err", msg)
			if err := h.remove(key, &deadLetter{queued: *q, Reason: ReasonExpired, Error: msg, At: now}); err != nil {
				d.logger.Error("outbox write failed", "webhook", w.Name, "err", err)
				sleep(time.Second)
				continue
			}
			h.failures[ReasonExpired].Add(1)
			attempt = 0
			continue
		}
		attempt++
		h.attempts.Add(1)
		// An attempt under way when Close is called is allowed to finish
		// (it is bounded by the webhook's timeout): aborting it could
		// deliver the notification without spanwatch knowing, and send it
		// again after the restart.
		r := h.s.send(context.WithoutCancel(ctx), q.Body, q.ID, now)
		if r.Err == nil {
			if err := h.remove(key, nil); err != nil {
				d.logger.Error("outbox write failed after delivery: it will be sent again", "webhook", w.Name, "err", err)
				sleep(time.Second)
				continue
			}
			h.delivered.Add(1)
			if ctx.Err() != nil {
				return
			}
			if lastLogged != "" {
				d.logger.Info("webhook delivering again", "webhook", w.Name, "attempts", attempt)
				lastLogged = ""
			}
			attempt = 0
			continue
		}
		h.failures[r.Reason].Add(1)
		h.setLastErr(r.Err)
		if ctx.Err() != nil {
			return // shutting down: the notification stays queued
		}
		if !r.Retry {
			d.logger.Error("notification rejected: moved to dead letters", "webhook", w.Name, "group", q.Group, "alerts", q.Alerts, "reason", r.Reason, "err", r.Err)
			if err := h.remove(key, &deadLetter{queued: *q, Reason: r.Reason, Error: r.Err.Error(), At: now}); err != nil {
				d.logger.Error("outbox write failed", "webhook", w.Name, "err", err)
				sleep(time.Second)
			}
			attempt = 0
			continue
		}
		wait := backoff(w.MinBackoff.D(), w.MaxBackoff.D(), attempt)
		if r.RetryAfter > 0 {
			wait = min(r.RetryAfter, maxRetryAfter)
		}
		// Warn when the error changes, not at every attempt.
		if s := r.Reason + r.Err.Error(); s != lastLogged {
			d.logger.Warn("delivery failed: retrying", "webhook", w.Name, "reason", r.Reason, "attempt", attempt, "retry_in", wait.Round(time.Millisecond), "err", r.Err)
			lastLogged = s
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
