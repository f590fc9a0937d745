package notify

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"text/template"
	"time"

	"github.com/spanwatch/spanwatch/alert"
	"github.com/spanwatch/spanwatch/internal/crashpoint"
	bolt "go.etcd.io/bbolt"
)

// Errors returned by Notify.
var (
	// ErrOutboxFull means the outbox holds max_entries already; the alerts
	// named in the error were refused and counted as overflow.
	ErrOutboxFull = errors.New("outbox full")
	// ErrClosed means the Dispatcher was closed.
	ErrClosed = errors.New("dispatcher closed")
	// ErrHoldFull means the outbox could not be written and MaxHeld alerts
	// wait in memory already; the alerts named in the error were refused
	// and counted.
	ErrHoldFull = errors.New("outbox not writable and alert hold full")
)

// Options are the parts of a Dispatcher that do not come from the
// configuration file.
type Options struct {
	// Logger receives delivery failures and outbox recovery; nil discards.
	Logger *slog.Logger
	// MaxHeld bounds the alerts kept in memory while the outbox cannot be
	// written (a full disk): DefaultMaxHeld when 0. Past it, alerts are
	// refused with ErrHoldFull and counted (Stats().Outbox.HeldDropped).
	MaxHeld int
}

// DefaultMaxHeld is Options.MaxHeld's default: about 1 KB of memory each.
const DefaultMaxHeld = 10000

// A Dispatcher groups alerts and delivers them to every configured webhook,
// through a durable outbox. It implements alert.Notifier. Create it with
// New and Close it when done.
type Dispatcher struct {
	cfg    *Config
	logger *slog.Logger
	db     *bolt.DB

	maxEntries int
	entries    atomic.Int64 // stored alerts + queued notifications; changed under mu
	overflow   atomic.Uint64
	corrupt    string // where a damaged outbox was moved, if one was
	corruptErr string
	salvaged   int // records carried over from the damaged outbox
	unreadable int // records of the damaged outbox that could not be
	orphans    int // entries kept for webhooks no longer configured

	maxHeld      int
	held         []*alert.Alert // accepted, not yet written (guarded by mu)
	pendingFlush []touched      // groups to notify before the next held alert (guarded by mu)
	heldDropped  atomic.Uint64
	writeErrors  atomic.Uint64
	holdKick     chan struct{}
	holdStop     context.CancelFunc
	holdDone     chan struct{}

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
	inQueue map[string]int  // queued notifications by group key; guarded by d.mu
	ds      deliveryState   // the delivery worker's; see deliveryState
	// flushFails counts the flushes in a row whose outbox write failed:
	// the next try waits a backoff, not a group_interval. Guarded by d.mu.
	flushFails int

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
	at      time.Time   // when timer fires; kept across a reload
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
	d := &Dispatcher{cfg: cfg, logger: logger, maxEntries: cfg.Routing.Outbox.MaxEntries,
		maxHeld: opts.MaxHeld, holdKick: make(chan struct{}, 1), holdDone: make(chan struct{})}
	if d.maxHeld <= 0 {
		d.maxHeld = DefaultMaxHeld
	}
	if d.maxEntries <= 0 {
		d.maxEntries = DefaultOutboxMaxEntries
	}
	hooks, err := d.newHooks(cfg)
	if err != nil {
		return nil, err
	}
	d.hooks = hooks
	db, rec, err := openOutbox(cfg.Routing.Outbox.Path)
	if err != nil {
		return nil, err
	}
	d.db = db
	if rec != nil {
		d.corrupt, d.corruptErr, d.salvaged, d.unreadable = rec.movedTo, rec.cause.Error(), rec.salvaged, rec.unreadable
		logger.Error("outbox_damaged_moved_aside",
			"path", cfg.Routing.Outbox.Path, "moved_to", rec.movedTo, "err", rec.cause,
			"salvaged", rec.salvaged, "unreadable", rec.unreadable, "damage", strings.Join(rec.problems, "; "))
	}
	d.mu.Lock()
	err = d.restoreLocked(nil)
	d.mu.Unlock()
	if err != nil {
		db.Close()
		return nil, err
	}
	d.start()
	hctx, stop := context.WithCancel(context.Background())
	d.holdStop = stop
	go func() {
		defer close(d.holdDone)
		d.holdWriter(hctx)
	}()
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
			due: map[*group]bool{}, kick: make(chan struct{}, 1), failures: map[string]*atomic.Uint64{},
			inQueue: map[string]int{}}
		for _, r := range reasons {
			h.failures[r] = new(atomic.Uint64)
		}
		if w.TLS != nil && w.TLS.InsecureSkipVerify {
			d.logger.Warn("webhook_tls_verify_disabled", "webhook", w.Name)
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
// resumes. What delivery was doing carries over for every webhook that
// keeps its name: counters, and for one that keeps its destination too, the
// backoff of the notification being retried; a group keeps its timer. So a
// reload, however often, neither resends early nor restarts a backoff. The
// outbox path cannot change without a restart. When cfg is rejected, or
// the outbox cannot be regrouped, the running configuration stays whole.
// Reload is PrepareReload, then Commit.
func (d *Dispatcher) Reload(cfg *Config) error {
	p, err := d.PrepareReload(cfg)
	if err != nil {
		return err
	}
	return p.Commit()
}

// A PreparedReload is a configuration checked against the running
// dispatcher, its webhooks built, ready to put in place with Commit. It
// changes nothing until then; dropping it changes nothing.
type PreparedReload struct {
	d     *Dispatcher
	cfg   *Config
	hooks []*hook
}

// PrepareReload checks cfg against the running dispatcher and builds its
// webhooks (senders, templates), without touching what runs.
func (d *Dispatcher) PrepareReload(cfg *Config) (*PreparedReload, error) {
	if cfg.Routing.Outbox.Path != d.cfg.Routing.Outbox.Path {
		return nil, fmt.Errorf("reload: outbox path changed from %s to %s: restart spanwatch to move it", d.cfg.Routing.Outbox.Path, cfg.Routing.Outbox.Path)
	}
	hooks, err := d.newHooks(cfg)
	if err != nil {
		return nil, fmt.Errorf("reload: %w", err)
	}
	return &PreparedReload{d: d, cfg: cfg, hooks: hooks}, nil
}

// Commit puts the prepared configuration in place. On error (the outbox
// could not be regrouped, or the dispatcher is closed) the running one
// stays, with its groups and delivery state.
func (p *PreparedReload) Commit() error {
	d, cfg, hooks := p.d, p.cfg, p.hooks
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
	old, oldCfg, oldMax := d.hooks, d.cfg, d.maxEntries
	deadlines := map[string]time.Time{}
	for _, oh := range old {
		for _, g := range oh.groups {
			if !g.at.IsZero() {
				deadlines[g.key] = g.at // group keys start with the webhook's name
			}
		}
	}
	for _, nh := range hooks {
		for _, oh := range old {
			if oh.w.Name != nh.w.Name {
				continue
			}
			nh.attempts.Store(oh.attempts.Load())
			nh.delivered.Store(oh.delivered.Load())
			for r, c := range oh.failures {
				nh.failures[r].Store(c.Load())
			}
			nh.lastErr.Store(oh.lastErr.Load())
			nh.flushFails = oh.flushFails
			if oh.w.URL == nh.w.URL && oh.w.URLFile == nh.w.URLFile {
				nh.ds = oh.ds
			}
		}
	}
	d.cfg, d.hooks, d.orphans = cfg, hooks, 0
	if cfg.Routing.Outbox.MaxEntries > 0 {
		d.maxEntries = cfg.Routing.Outbox.MaxEntries
	}
	err := d.restoreLocked(deadlines)
	if err != nil {
		// The regrouping's transaction rolled back: the old webhooks
		// resume with their groups, timers where they were.
		d.cfg, d.hooks, d.maxEntries = oldCfg, old, oldMax
		now := time.Now()
		for _, h := range old {
			for _, g := range h.groups {
				h.schedule(g, max(0, g.at.Sub(now)))
			}
		}
	}
	d.mu.Unlock()
	d.start()
	if err != nil {
		return fmt.Errorf("reload: %w", err)
	}
	return nil
}

// restoreLocked loads the alerts, notification log and queue depth left in
// the outbox, and schedules each group: at its deadline in deadlines (a
// reload: by group key) when it has one, else as a restart would. Called
// with d.mu held.
func (d *Dispatcher) restoreLocked(deadlines map[string]time.Time) error {
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
					d.logger.Error("outbox_record_unreadable_kept", "webhook", h.w.Name, "key", string(k), "err", err)
					return nil
				}
				fp := fingerprint(sa.Alert)
				if !h.matches(sa.Alert) {
					d.logger.Warn("stored_alert_unmatched_removed", "webhook", h.w.Name, "alert", sa.Alert.Name(), "fingerprint", fp)
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
			n := 0
			qb.ForEach(func(k, v []byte) error {
				n++
				var q queued
				if json.Unmarshal(v, &q) == nil {
					h.inQueue[q.Group]++
				}
				return nil
			})
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
			if at, ok := deadlines[g.key]; ok {
				wait = max(0, at.Sub(now))
			} else if g.flushed {
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
					d.logger.Warn("outbox_orphaned_entries_kept",
						"webhook", string(name), "kind", string(top), "entries", n)
				}
			}
			return nil
		})
	}
}

// Notify accepts alerts for delivery: it returns once they are written to
// the outbox. Firing and resolved alerts are delivered; pending and
// inactive ones are ignored. When the outbox cannot be written (a full
// disk, an I/O error), the alerts are held in memory, in order, up to
// Options.MaxHeld, and written with backoff until the outbox takes them;
// alerts that arrive meanwhile queue behind them. An alert that fired and
// resolved while held, or that comes firing then resolved in one call, is
// delivered firing, then resolved. retry is true when the caller should
// offer the same alerts again later: the outbox is full (max_entries), or
// the hold is.
func (d *Dispatcher) Notify(ctx context.Context, alerts ...*alert.Alert) (retry bool, err error) {
	if err := ctx.Err(); err != nil {
		return true, err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return false, ErrClosed
	}
	var accepted []*alert.Alert
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
		accepted = append(accepted, &ac)
	}
	if len(accepted) == 0 {
		return false, nil
	}
	if len(d.held) > 0 {
		// Behind the alerts already held: order is kept.
		return d.holdLocked(accepted)
	}
	if repeated(accepted) {
		// The same alert twice (a restored alert never sent again fires
		// and resolves at once): written in steps as held alerts are, its
		// group notified of the first state before the next replaces it.
		// What cannot be written stays held for the hold writer.
		if retry, err := d.holdLocked(accepted); err != nil {
			return retry, err
		}
		if err := d.flushHeldLocked(time.Now()); err != nil {
			d.writeErrors.Add(1)
			d.logger.Error("outbox_write_failed_alerts_held", "alerts", len(accepted), "held", len(d.held), "max_held", d.maxHeld, "err", err)
		}
		return false, nil
	}
	refused, _, err := d.writeAlertsLocked(accepted, time.Now())
	if err != nil {
		d.writeErrors.Add(1)
		d.logger.Error("outbox_write_failed_alerts_held", "alerts", len(accepted), "held", len(d.held)+len(accepted), "max_held", d.maxHeld, "err", err)
		return d.holdLocked(accepted)
	}
	return d.refusedLocked(refused)
}

// repeated reports whether an alert comes twice in alerts (by
// fingerprint).
func repeated(alerts []*alert.Alert) bool {
	seen := make(map[string]bool, len(alerts))
	for _, a := range alerts {
		if seen[a.Fingerprint] {
			return true
		}
		seen[a.Fingerprint] = true
	}
	return false
}

// refusedLocked reports alerts the full outbox refused.
func (d *Dispatcher) refusedLocked(refused int) (bool, error) {
	if refused == 0 {
		return false, nil
	}
	d.overflow.Add(uint64(refused))
	err := fmt.Errorf("%w: %d entries (max_entries): %d alert deliveries refused; raise routing.outbox.max_entries or fix the webhooks that do not accept alerts", ErrOutboxFull, d.maxEntries, refused)
	d.logger.Error("outbox_full_alerts_refused", "refused", refused, "max_entries", d.maxEntries)
	return true, err
}

// holdLocked keeps alerts in memory for the hold writer, as many as
// MaxHeld allows; the rest are refused and counted.
func (d *Dispatcher) holdLocked(alerts []*alert.Alert) (bool, error) {
	n := min(len(alerts), max(0, d.maxHeld-len(d.held)))
	d.held = append(d.held, alerts[:n]...)
	select {
	case d.holdKick <- struct{}{}:
	default:
	}
	if dropped := len(alerts) - n; dropped > 0 {
		d.heldDropped.Add(uint64(dropped))
		d.logger.Error("outbox_hold_full_alerts_refused", "refused", dropped, "max_held", d.maxHeld)
		return true, fmt.Errorf("%w: the outbox cannot be written and %d alerts wait in memory already: %d refused", ErrHoldFull, d.maxHeld, dropped)
	}
	return false, nil
}

// touched is a group an outbox write changed, and the alert it wrote.
type touched struct {
	h  *hook
	g  *group
	fp string
}

// writeAlertsLocked writes alerts to the outbox in one transaction and
// adds them to their groups. refused counts those the full outbox did not
// take; err is a failed write, after which nothing changed.
func (d *Dispatcher) writeAlertsLocked(alerts []*alert.Alert, now time.Time) (refused int, groups []touched, err error) {
	type op struct {
		h      *hook
		gk     string
		labels map[string]string
		fp     string
		sa     *storedAlert
	}
	var ops []op
	var added int64
	err = d.db.Update(func(tx *bolt.Tx) error {
		ops, added, refused = ops[:0], 0, 0
		for _, ac := range alerts {
			for _, h := range d.hooks {
				if !h.matches(ac) {
					continue
				}
				gk, labels := h.groupKey(ac)
				b := subRO(tx, bucketAlerts, h.w.Name)
				key := []byte(gk + "\x00" + ac.Fingerprint)
				sa := &storedAlert{Alert: ac, Accepted: now}
				if old := b.Get(key); old != nil {
					var prev storedAlert
					if json.Unmarshal(old, &prev) == nil && prev.Alert != nil &&
						identity(prev.Alert) == identity(ac) && prev.Alert.State == ac.State {
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
		crashpoint.Hit("outbox_write")
		return writeFault()
	})
	if err != nil {
		return 0, nil, fmt.Errorf("write outbox: %w", err)
	}
	d.entries.Add(added)
	for _, o := range ops {
		h := o.h
		g := h.groups[o.gk]
		if g == nil {
			g = h.newGroup(o.gk, o.labels)
			g.alerts[o.fp] = o.sa
			h.schedule(g, h.initialWait(g, now))
		} else {
			g.alerts[o.fp] = o.sa
			// Like Alertmanager: before the group's first notification, an
			// alert whose group_wait is already over (it started long ago)
			// makes the group flush at once.
			if !g.flushed && !o.sa.Alert.StartsAt.IsZero() && o.sa.Alert.StartsAt.Add(h.w.GroupWait.D()).Before(now) {
				h.schedule(g, 0)
			}
		}
		groups = append(groups, touched{h, g, o.fp})
	}
	return refused, groups, nil
}

// writeFault, when set (by tests), fails outbox writes of alerts.
var writeFault = func() error { return nil }

// holdWriter writes the held alerts to the outbox, with backoff from
// 100ms to 30s while it fails, until ctx ends.
func (d *Dispatcher) holdWriter(ctx context.Context) {
	fails := 0
	for {
		if fails == 0 {
			select {
			case <-ctx.Done():
				return
			case <-d.holdKick:
			}
		} else {
			// A new alert does not cut the backoff short.
			t := time.NewTimer(backoff(100*time.Millisecond, 30*time.Second, fails))
			select {
			case <-ctx.Done():
				t.Stop()
				return
			case <-t.C:
			}
		}
		d.mu.Lock()
		if d.closed {
			d.mu.Unlock()
			return
		}
		held := len(d.held)
		err := d.flushHeldLocked(time.Now())
		left := len(d.held)
		d.mu.Unlock()
		switch {
		case err != nil:
			fails++
			d.writeErrors.Add(1)
			if fails == 1 || fails%10 == 0 {
				d.logger.Error("outbox_write_failed_alerts_held", "held", left, "attempts", fails, "err", err)
			}
		case held > 0:
			if fails > 0 {
				d.logger.Info("outbox_writable_again", "written", held-left, "attempts", fails)
			}
			fails = 0
		}
	}
}

// flushHeldLocked writes the held alerts in order. An alert held twice
// (it fired, then resolved) is written in steps: its first state, then
// its group's notification is queued at once, then the next state, so that
// a receiver hears of the episode it would otherwise miss. On error what
// is left stays held, and the next call resumes where this one stopped.
func (d *Dispatcher) flushHeldLocked(now time.Time) error {
	if err := d.flushPendingLocked(now); err != nil {
		return err
	}
	for len(d.held) > 0 {
		seen := map[string]bool{}
		n := 0
		for n < len(d.held) && !seen[d.held[n].Fingerprint] {
			seen[d.held[n].Fingerprint] = true
			n++
		}
		refused, groups, err := d.writeAlertsLocked(d.held[:n], now)
		if err != nil {
			return err
		}
		d.refusedLocked(refused)
		clear(d.held[:n])
		d.held = d.held[n:]
		if len(d.held) == 0 {
			d.held = nil
			return nil
		}
		// Alerts with a later state still held: their groups notify
		// now, before that state replaces this one.
		later := map[string]bool{}
		for _, a := range d.held {
			later[a.Fingerprint] = true
		}
		for _, t := range groups {
			if later[t.fp] {
				d.pendingFlush = append(d.pendingFlush, t)
			}
		}
		if err := d.flushPendingLocked(now); err != nil {
			return err
		}
	}
	return nil
}

// flushPendingLocked flushes the groups flushHeldLocked marked, each
// webhook's in one transaction.
func (d *Dispatcher) flushPendingLocked(now time.Time) error {
	if len(d.pendingFlush) == 0 {
		return nil
	}
	byHook := map[*hook][]*group{}
	var order []*hook
	seen := map[*group]bool{}
	for _, t := range d.pendingFlush {
		if t.h.groups[t.g.key] != t.g || seen[t.g] {
			continue // gone since (a reload), or listed already
		}
		seen[t.g] = true
		if _, ok := byHook[t.h]; !ok {
			order = append(order, t.h)
		}
		byHook[t.h] = append(byHook[t.h], t.g)
	}
	for _, h := range order {
		if err := h.flushLocked(byHook[h], now); err != nil {
			return err
		}
		delete(byHook, h)
	}
	d.pendingFlush = nil
	return nil
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
	if err := d.flushHeldLocked(time.Now()); err != nil {
		d.mu.Unlock()
		return fmt.Errorf("flush: %d alerts held: %w", len(d.held), err)
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
		if len(d.held) > 0 {
			d.logger.Error("outbox_closed_held_alerts_lost", "alerts", len(d.held), "reason", "the outbox could not be written until the end")
		}
		d.mu.Unlock()
		d.holdStop()
		<-d.holdDone
		d.stop()
		d.closeErr = d.db.Close()
	})
	return d.closeErr
}
