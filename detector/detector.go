package detector

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"runtime"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/spanwatch/spanwatch/alert"
	"github.com/spanwatch/spanwatch/internal/crashpoint"
	"github.com/spanwatch/spanwatch/policy"
	"github.com/spanwatch/spanwatch/snapshot"
)

// Config configures a Detector.
type Config struct {
	Logger *slog.Logger
	// Notifier receives firing and resolved alerts (pending ones are not
	// sent, as in Prometheus). It may be nil: Evaluate still returns the
	// changes. Evaluate and Overrun may call it concurrently.
	Notifier alert.Notifier
	// PolicyTimeout bounds each Rego policy's evaluation (default 1s), and
	// PolicyMemory how far the Go heap may grow while the policies of one
	// snapshot evaluate (default policy.DefaultPolicyMemory); a rule
	// file's policy_limits: override them. A policy cut off at either is
	// reported (logged once, counted, listed by PolicyCutOffs) and its
	// alerts keep their state; the other policies evaluate.
	PolicyTimeout time.Duration
	PolicyMemory  int64
	// PolicyWorkers is how many policies evaluate at once (default
	// GOMAXPROCS): policies are independent and share one read-only input.
	PolicyWorkers int
	// ResendInterval re-sends firing alerts to the notifier this often
	// (default 1m, Prometheus' --rules.alert.resend-delay). Each firing
	// alert sent carries EndsAt = now + 4 x max(ResendInterval, the
	// snapshot interval), as Prometheus sends them: Alertmanager keeps it
	// firing while the resends keep coming, tolerates a few lost ones,
	// and resolves it by itself if the agent goes away.
	ResendInterval time.Duration
	// ExternalLabels are added to every alert (rule, policy and overrun
	// alerts) that does not set the label itself, so the same alert from
	// two nodes stays two alerts in a clustered Alertmanager. The rule
	// file's external_labels are applied over them (a label set to ""
	// there removes one). Nil means DefaultExternalLabels ({node:
	// NODE_NAME or the host name}); an empty map adds none.
	ExternalLabels map[string]string
	// OverrunInterval is how long an overrun alert for one span and
	// process suppresses the next (default 1m).
	OverrunInterval time.Duration
	// OverrunResolveTimeout is how long an overrun alert lasts after the
	// last one sent (its EndsAt; default 4 x OverrunInterval, at least
	// OverrunInterval). Overruns that keep coming within it continue the
	// same episode: the alert keeps its StartsAt, and each resend (at
	// most one per OverrunInterval) moves its EndsAt on.
	OverrunResolveTimeout time.Duration
	// OverrunBurst caps overrun alerts over all spans per OverrunInterval
	// (default 100).
	OverrunBurst int
	// BaselineTTL drops the baseline of a series not seen for this long
	// (default 1h).
	BaselineTTL time.Duration
	// OnRuleError, if set, is called for each failed evaluation of a rule
	// or policy (by name), e.g. to count errors per rule in metrics.
	OnRuleError func(rule string, err error)
	// Now is the clock for overruns without a time (default time.Now).
	// Evaluate uses the snapshot's time, so replays are deterministic.
	Now func() time.Time
	// Store, when set, keeps the detector's state for a restart (Restore
	// reads it back): saved after an evaluation whose alerts changed,
	// before their notifications are sent (and again once the resolved
	// ones are), and otherwise every SaveInterval (default
	// DefaultSaveInterval).
	Store        StateStore
	SaveInterval time.Duration
}

// A Detector evaluates rules over snapshots. Its methods are safe for
// concurrent use: Overrun may run while Evaluate does.
type Detector struct {
	cfg   Config
	log   *slog.Logger
	rules atomic.Pointer[policy.Config]

	evalMu    sync.Mutex // serializes Evaluate; guards baselines and hist
	baselines map[string]*baselineEntry
	// baselineMu guards baselines while a rule's series evaluate on
	// several goroutines.
	baselineMu sync.Mutex
	gcRules    *policy.Config // the rule set and time of the last gcBaselines
	gcAt       time.Time
	hist       *history

	mu     sync.Mutex // guards groups
	groups map[string]*group

	ext externalLabels

	historyBytes atomic.Int64
	historyTrim  atomic.Bool

	cutMu  sync.Mutex // guards cutOff
	cutOff map[string]*PolicyCutOff
	// restoredAt is when Restore brought a saved state back (zero when
	// none); lastSave when the state was last saved. Guarded by evalMu.
	restoredAt time.Time
	lastSave   time.Time

	ovMu      sync.Mutex
	ovSeen    map[string]*overrunEntry
	ovWindow  time.Time
	ovInWin   int
	ovWinDrop uint64

	stats counters

	// straight turns off what only makes evaluation faster (rules over
	// many series on several goroutines, the baselines each series
	// keeps, the history's alignment with the last window's order): the
	// test that the fast and the straightforward evaluation agree sets it.
	straight bool
}

type baselineEntry struct {
	b      policy.Baseline
	seen   time.Time
	rule   string
	metric policy.Metric
	// dead marks an entry the map no longer holds: series histories
	// that keep it look it up again.
	dead bool
}

// A group is the alerts of one rule or policy, by fingerprint.
type group struct {
	kind   string // "rule" or "policy"
	name   string
	active map[string]*active
}

type active struct {
	a        *alert.Alert
	activeAt time.Time
	lastSent time.Time
	// validUntil is the EndsAt of the last firing notification sent.
	validUntil time.Time
	// keepFiringSince is the first evaluation at which a firing alert's
	// rule no longer held (zero while it holds), as in Prometheus.
	keepFiringSince time.Time
	// restored marks an alert Restore brought back that its rule has not
	// confirmed since: it is not resolved while the rule's range refills
	// after the restart.
	restored bool
	// ending marks a restored alert that was saved as it resolved, before
	// its resolved notification was written: its firing went out before.
	ending bool
}

// DefaultResendInterval is how often a firing alert is sent again when
// Config.ResendInterval is 0.
const DefaultResendInterval = time.Minute

// New returns a Detector with no rules; call SetRules.
func New(cfg Config) *Detector {
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.PolicyTimeout <= 0 {
		cfg.PolicyTimeout = policy.DefaultPolicyTimeout
	}
	if cfg.PolicyMemory <= 0 {
		cfg.PolicyMemory = policy.DefaultPolicyMemory
	}
	if cfg.PolicyWorkers <= 0 {
		cfg.PolicyWorkers = runtime.GOMAXPROCS(0)
	}
	if cfg.ResendInterval <= 0 {
		cfg.ResendInterval = DefaultResendInterval
	}
	if cfg.OverrunInterval <= 0 {
		cfg.OverrunInterval = time.Minute
	}
	if cfg.OverrunResolveTimeout <= 0 {
		cfg.OverrunResolveTimeout = 4 * cfg.OverrunInterval
	}
	cfg.OverrunResolveTimeout = max(cfg.OverrunResolveTimeout, cfg.OverrunInterval)
	if cfg.ExternalLabels == nil {
		cfg.ExternalLabels = DefaultExternalLabels()
	}
	if cfg.OverrunBurst <= 0 {
		cfg.OverrunBurst = 100
	}
	if cfg.BaselineTTL <= 0 {
		cfg.BaselineTTL = time.Hour
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.SaveInterval <= 0 {
		cfg.SaveInterval = DefaultSaveInterval
	}
	return &Detector{
		cfg:       cfg,
		log:       cfg.Logger,
		ext:       externalLabels{base: maps.Clone(cfg.ExternalLabels)},
		baselines: map[string]*baselineEntry{},
		hist:      newHistory(),
		groups:    map[string]*group{},
		ovSeen:    map[string]*overrunEntry{},
		cutOff:    map[string]*PolicyCutOff{},
	}
}

// SetRules swaps the rule set atomically. Alerts and baselines of rules and
// policies that keep their names carry over; those of removed ones are
// resolved by the next Evaluate.
func (d *Detector) SetRules(cfg *policy.Config) {
	d.rules.Store(cfg)
}

// Rules returns the current rule set (nil before SetRules).
func (d *Detector) Rules() *policy.Config { return d.rules.Load() }

func groupKey(kind, name string) string { return kind + "/" + name }

// result is one alert a rule or policy produced in this evaluation.
type result struct {
	labels      map[string]string
	annotations map[string]string
	value       string
}

type ruleOutput struct {
	key           string
	kind, name    string
	over          time.Duration // the range
	forDur        time.Duration
	keepFiringFor time.Duration
	results       map[string]result // by fingerprint
	failed        bool              // keep the previous state: no resolving
}

// Evaluate runs every rule and policy over the snapshot, advances the alert
// lifecycle to the snapshot's time, sends firing and resolved alerts to the
// notifier, and returns every alert whose state changed (including pending
// ones and pending ones that went back to inactive). Rule and policy errors
// are counted and logged, not returned: one bad policy does not stop the
// others. The error is the notifier's, if it failed.
func (d *Detector) Evaluate(ctx context.Context, snap *snapshot.Snapshot) ([]*alert.Alert, error) {
	if snap == nil {
		return nil, errors.New("evaluate: nil snapshot")
	}
	d.evalMu.Lock()
	defer d.evalMu.Unlock()
	start := time.Now()
	d.stats.evaluations.Add(1)
	now := snap.Time
	if now.IsZero() {
		now = d.cfg.Now()
	}
	cfg := d.rules.Load()
	ext := d.ext.get(cfg)
	if bound := d.historyBytes.Load(); bound != d.hist.maxBytes {
		d.hist.maxBytes, d.hist.autoTrim = bound, false
	}
	d.hist.trimUnused = d.historyTrim.Load() || d.hist.autoTrim
	d.hist.straight, d.hist.workers = d.straight, d.cfg.PolicyWorkers
	d.hist.observe(snap, longestRange(cfg))
	var outs []*ruleOutput
	var needs []time.Duration // each series' longest range, with trimUnused
	if cfg != nil {
		outs = make([]*ruleOutput, 0, len(cfg.Rules)+len(cfg.Policies))
		idx := indexSpans(snap)
		// Select each rule's series first, so the series a range needs
		// are aggregated together, on several goroutines when many.
		sels := d.selectAll(idx, cfg.Rules)
		need := map[time.Duration][]bool{}
		for i, r := range cfg.Rules {
			if r.Over > 0 {
				n := need[r.Over]
				if n == nil {
					n = make([]bool, len(snap.Series))
					need[r.Over] = n
				}
				for _, j := range sels[i] {
					n[j] = true
				}
			}
		}
		for _, p := range cfg.Policies {
			if p.Over > 0 {
				need[p.Over] = nil // every series: the prefilter reads them all
			}
		}
		for over, n := range need {
			d.hist.prepare(over, n, d.cfg.PolicyWorkers)
		}
		if d.hist.trimUnused {
			needs = seriesNeeds(len(snap.Series), need)
		}
		for i, r := range cfg.Rules {
			outs = append(outs, d.evalRule(r, sels[i], now, ext))
		}
		if len(cfg.Policies) > 0 {
			outs = append(outs, d.evalPolicies(ctx, cfg, d.policyInputs(snap, cfg.Policies), ext)...)
		}
		d.gcBaselines(cfg, now)
	}
	if d.hist.trimUnused && needs == nil && cfg != nil {
		// The bound turned trimming on in observe, after the rules'
		// selections were made: select again.
		needs = d.seriesNeedsOf(cfg, snap)
	}
	if needs != nil {
		d.hist.trimToRules(needs)
	} else {
		d.hist.trimSince = time.Time{}
	}
	hs := d.hist.stats()
	d.stats.historyBytes.Store(hs.bytes)
	d.stats.historyDropped.Store(hs.dropped)
	d.stats.historyCovered.Store(int64(hs.covered))
	d.stats.historyWanted.Store(int64(longestRange(cfg)))
	d.stats.historyTrimSince.Store(unixNanos(hs.trimSince))
	d.stats.historyDepthSince.Store(unixNanos(hs.depthSince))
	d.hist.release()
	changed, send, ended := d.advance(outs, now, d.validity(snap.Window()))
	crashpoint.Hit("evaluate")
	d.stats.lastEvalNs.Store(int64(time.Since(start)))
	if d.cfg.Store != nil && (len(changed) > 0 || now.Sub(d.lastSave) >= d.cfg.SaveInterval || now.Before(d.lastSave)) {
		// Before the notifications: a restart after this finds the
		// alerts that fire now firing (and sends them again, the same
		// episode), and those that resolve now still firing (resolved
		// again, and notified).
		d.saveState(now, ended)
	}
	err := d.notify(ctx, send)
	if d.cfg.Store != nil && len(ended) > 0 && err == nil {
		d.saveState(now, nil)
	}
	return changed, err
}

// seriesNeeds is, for each of n series, the longest range that a rule
// selecting it or a policy asks: need holds, by range, the series it
// selects (nil: every series).
func seriesNeeds(n int, need map[time.Duration][]bool) []time.Duration {
	out := make([]time.Duration, n)
	for over, sel := range need {
		for i := range out {
			if (sel == nil || sel[i]) && over > out[i] {
				out[i] = over
			}
		}
	}
	return out
}

// seriesNeedsOf is seriesNeeds for a snapshot whose selections were not
// kept.
func (d *Detector) seriesNeedsOf(cfg *policy.Config, snap *snapshot.Snapshot) []time.Duration {
	idx := indexSpans(snap)
	need := map[time.Duration][]bool{}
	for _, r := range cfg.Rules {
		if r.Over <= 0 {
			continue
		}
		n := need[r.Over]
		if n == nil {
			n = make([]bool, len(snap.Series))
			need[r.Over] = n
		}
		for _, j := range idx.selectSeries(&r.Match, nil) {
			n[j] = true
		}
	}
	for _, p := range cfg.Policies {
		if p.Over > 0 {
			need[p.Over] = nil
		}
	}
	return seriesNeeds(len(snap.Series), need)
}

func unixNanos(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixNano()
}

// SetHistoryBytes bounds the memory of the range history (0: no bound):
// past it, the oldest windows go, every series' at once, and ranges cover
// what is left (Stats.HistoryCovered). The memory budget sets it; the
// next evaluation applies it.
func (d *Detector) SetHistoryBytes(n int64) { d.historyBytes.Store(n) }

// SetHistoryTrim makes each series keep only the windows the ranges of
// its own rules reach, instead of the longest range of the rule set: what
// the memory budget sheds under pressure (memory.UnusedHistory).
func (d *Detector) SetHistoryTrim(on bool) { d.historyTrim.Store(on) }

// longestRange is how far back the rule set's ranges reach.
func longestRange(cfg *policy.Config) time.Duration {
	if cfg == nil {
		return 0
	}
	return cfg.LongestRange()
}

// policyInputs makes each policy's input, indexed like pols: the series
// over the policy's range, each converted at most once for all policies,
// and only those the policy could read (policy.Batch).
func (d *Detector) policyInputs(snap *snapshot.Snapshot, pols []*policy.Policy) []policy.InputValue {
	b := policy.NewBatch(snap)
	out := make([]policy.InputValue, len(pols))
	for i, p := range pols {
		series, covered := d.hist.aggregateAll(p.Over)
		out[i] = b.Input(p, series, covered)
	}
	return out
}

// spanIndex groups a snapshot's series by span name, so each rule matches
// its span glob once per distinct name instead of once per series.
type spanIndex struct {
	snap  *snapshot.Snapshot
	names []string // in order of first appearance
	by    map[string][]int32
	// metrics counts, by name, the series that are metrics: a name
	// without any is taken whole by a matcher of span names alone.
	metrics map[string]int
}

func indexSpans(snap *snapshot.Snapshot) *spanIndex {
	idx := &spanIndex{snap: snap, by: map[string][]int32{}, metrics: map[string]int{}}
	for i := range snap.Series {
		s := &snap.Series[i]
		name := s.Span
		l, ok := idx.by[name]
		if !ok {
			idx.names = append(idx.names, name)
		}
		idx.by[name] = append(l, int32(i))
		if s.IsMetric() {
			idx.metrics[name]++
		}
	}
	return idx
}

// selectAll selects each rule's series, on up to PolicyWorkers goroutines
// (each takes the next rule): the index is only read.
func (d *Detector) selectAll(idx *spanIndex, rules []*policy.Rule) [][]int32 {
	sels := make([][]int32, len(rules))
	workers := min(d.cfg.PolicyWorkers, len(rules), len(idx.snap.Series)/parallelMin+1)
	if d.straight {
		workers = 1
	}
	eachIndex(len(rules), workers, func(i int) { sels[i] = idx.selectSeries(&rules[i].Match, nil) })
	return sels
}

// selectSeries appends the indexes of the series m selects, in snapshot
// order within each span name.
func (idx *spanIndex) selectSeries(m *policy.Matcher, out []int32) []int32 {
	spanOnly := m.SpanOnly()
	add := func(name string) {
		list := idx.by[name]
		if spanOnly && idx.metrics[name] == 0 {
			out = append(out, list...)
			return
		}
		for _, i := range list {
			if m.MatchOther(&idx.snap.Series[i]) {
				out = append(out, i)
			}
		}
	}
	if m.Span != nil {
		if name, ok := m.Span.Exact(); ok {
			add(name)
			return out
		}
	}
	for _, name := range idx.names {
		if m.MatchSpan(name) {
			add(name)
		}
	}
	return out
}

// ruleParallelMin is the fewest selected series worth evaluating a rule
// on several goroutines (a variable for the equivalence test).
var ruleParallelMin = 4096

// rulePart is what evaluating a rule over a run of its selected series
// produced, in the order of the series.
type rulePart struct {
	fps     []string
	results []result
	err     error // the first
	failed  bool
}

// evalRule evaluates a rule over the selected series of the current
// snapshot, each aggregated over the rule's range. Many series are split
// into runs evaluated on up to PolicyWorkers goroutines; the runs' results
// are merged in series order, so the output is the one of a single pass.
// An anomaly rule stays on one goroutine when two series share a history
// (and so a baseline), or when the history does not align them.
func (d *Detector) evalRule(r *policy.Rule, selected []int32, now time.Time, ext map[string]string) *ruleOutput {
	out := &ruleOutput{key: groupKey("rule", r.Name), kind: "rule", name: r.Name, over: r.Over, forDur: r.For, keepFiringFor: r.KeepFiringFor, results: map[string]result{}}
	d.stats.ruleEvaluations.Add(1)
	workers := min(d.cfg.PolicyWorkers, len(selected)/ruleParallelMin+1)
	if d.straight || r.Kind == policy.KindAnomaly && (d.hist.dups || len(d.hist.cur) != len(d.hist.snap.Series)) {
		workers = 1
	}
	parts := make([]rulePart, max(workers, 1))
	inRuns(len(selected), workers, func(w, lo, hi int) {
		d.evalRuleSeries(r, selected[lo:hi], now, ext, &parts[w])
	})
	var firstErr error
	for i := range parts {
		p := &parts[i]
		for j, fp := range p.fps {
			out.results[fp] = p.results[j]
		}
		out.failed = out.failed || p.failed
		if firstErr == nil {
			firstErr = p.err
		}
	}
	if firstErr != nil {
		d.ruleError(r.Name, firstErr)
	}
	return out
}

// evalRuleSeries evaluates a rule over a run of its selected series into
// p. Runs of one rule may evaluate at once: they touch disjoint series and
// baselines.
func (d *Detector) evalRuleSeries(r *policy.Rule, selected []int32, now time.Time, ext map[string]string, p *rulePart) {
	var key []byte
	for _, i := range selected {
		s := d.hist.aggregated(r.Over, int(i))
		var value, threshold string
		var raw float64
		var metric policy.Metric
		switch r.Kind {
		case policy.KindThreshold:
			v, ok := r.When.Holds(s)
			if !ok {
				continue
			}
			metric = r.When.Terms[0].Metric
			value, raw, threshold = metric.Format(v), v, metric.Format(r.When.Terms[0].Threshold)
		case policy.KindAnomaly:
			a := r.Anomaly
			if s.Count < a.MinCount {
				continue
			}
			var be *baselineEntry
			be, key = d.baseline(r, int(i), s, key)
			be.seen = now
			v := a.Metric.Value(s)
			mean := be.b.Mean
			_, fire := a.Observe(&be.b, v)
			if !fire {
				continue
			}
			metric = a.Metric
			value, raw, threshold = a.Metric.Format(v), v, a.Metric.Format(mean)
		default:
			continue
		}
		// Only series that hold get their template data: it escapes to
		// the templates, and building it for every series was an
		// allocation per series and rule.
		data := &policy.TemplateData{Value: value, RawValue: raw, Threshold: threshold, Metric: string(metric), Labels: s.Labels(), Series: s}
		labels, annotations, err := r.Expand(data)
		if err != nil {
			if p.err == nil {
				p.err = err
			}
			p.failed = true
			continue
		}
		addExternal(labels, ext)
		p.fps = append(p.fps, alert.Fingerprint(labels))
		p.results = append(p.results, result{labels: labels, annotations: annotations, value: data.Value})
	}
}

// baseline returns the anomaly rule's baseline for series i of the
// current snapshot (s, over the rule's range), creating it. Each series'
// history keeps the baselines it was given, so a lookup in the detector's
// map (100k keys at 100k series) happens once per series and rule, not
// once per evaluation; an entry the map dropped (gcBaselines, Restore) is
// marked dead and looked up again.
func (d *Detector) baseline(r *policy.Rule, i int, s *snapshot.Series, key []byte) (*baselineEntry, []byte) {
	a := r.Anomaly
	var sh *seriesHist
	if !d.straight && len(d.hist.cur) == len(d.hist.snap.Series) {
		sh = d.hist.cur[i]
		for j := 0; j < len(sh.baselines); j++ {
			be := sh.baselines[j]
			if be.dead {
				sh.baselines = slices.Delete(sh.baselines, j, j+1)
				j--
				continue
			}
			if be.rule == r.Name && be.metric == a.Metric {
				return be, key
			}
		}
	}
	key = append(append(append(append(key[:0], r.Name...), 0), a.Metric...), 0)
	key = seriesKey(key, s)
	d.baselineMu.Lock()
	be := d.baselines[string(key)]
	if be == nil {
		be = &baselineEntry{rule: r.Name, metric: a.Metric}
		d.baselines[string(key)] = be
	}
	d.baselineMu.Unlock()
	if sh != nil {
		sh.baselines = append(sh.baselines, be)
	}
	return be, key
}

// ruleError counts, logs and reports a rule's failed evaluation.
func (d *Detector) ruleError(name string, err error) {
	d.stats.ruleErrors.Add(1)
	d.log.Warn("rule_error", "rule", name, "error", err)
	if d.cfg.OnRuleError != nil {
		d.cfg.OnRuleError(name, err)
	}
}

// gcBaselines drops baselines of removed rules and of series unseen for
// BaselineTTL. It walks every baseline, so it runs when the rules change
// and otherwise once per tenth of BaselineTTL.
func (d *Detector) gcBaselines(cfg *policy.Config, now time.Time) {
	if cfg == d.gcRules && now.Sub(d.gcAt) < d.cfg.BaselineTTL/10 && !now.Before(d.gcAt) {
		return
	}
	d.gcRules, d.gcAt = cfg, now
	names := make(map[string]policy.Metric, len(cfg.Rules))
	for _, r := range cfg.Rules {
		if r.Kind == policy.KindAnomaly {
			names[r.Name] = r.Anomaly.Metric
		}
	}
	for k, be := range d.baselines {
		if m, ok := names[be.rule]; !ok || m != be.metric || now.Sub(be.seen) > d.cfg.BaselineTTL {
			be.dead = true
			delete(d.baselines, k)
		}
	}
}

// validity is how long a firing alert sent now stays valid without being
// sent again: 4 x max(ResendInterval, interval), as in Prometheus, so two
// lost evaluations or notifications do not resolve it.
func (d *Detector) validity(interval time.Duration) time.Duration {
	return 4 * max(d.cfg.ResendInterval, interval)
}

// firingCopy is the copy of a firing alert that goes to the notifier: its
// EndsAt is when Alertmanager may consider it resolved if no resend
// arrives.
func firingCopy(ac *active, now time.Time, valid time.Duration) *alert.Alert {
	ac.lastSent = now
	ac.validUntil = now.Add(valid)
	c := clone(ac.a)
	c.EndsAt = ac.validUntil
	return c
}

// advance moves every alert to its state at now and returns the changes
// and the alerts to send. A firing alert goes out when it starts firing
// and again every ResendInterval, as Prometheus resends them.
func (d *Detector) advance(outs []*ruleOutput, now time.Time, valid time.Duration) (changed, send []*alert.Alert, ended []endedAlert) {
	d.mu.Lock()
	defer d.mu.Unlock()
	live := make(map[string]bool, len(outs))
	for _, o := range outs {
		live[o.key] = true
		g := d.groups[o.key]
		if g == nil {
			g = &group{kind: o.kind, name: o.name, active: map[string]*active{}}
			d.groups[o.key] = g
		}
		// Saved as it resolved (ending), before a restart: the life
		// before concluded the episode ended, and its resolved may have
		// gone out, its group then gone from the notification log. It
		// ends now, whatever the rule says: kept firing, or resent
		// firing while the range refills, it would reach the receiver
		// as the same episode in a new notification. If the condition
		// holds again, a new episode begins (pending, then firing).
		for _, fp := range sortedKeys(g.active) {
			if ac := g.active[fp]; ac.ending {
				ended = append(ended, endedAlert{key: o.key, kind: o.kind, name: o.name, saved: saveAlert(ac)})
				c, s := end(ac, now)
				changed = append(changed, c)
				if s != nil {
					send = append(send, s)
				}
				delete(g.active, fp)
			}
		}
		fps := make([]string, 0, len(o.results))
		for fp := range o.results {
			fps = append(fps, fp)
		}
		sort.Strings(fps)
		for _, fp := range fps {
			res := o.results[fp]
			ac := g.active[fp]
			if ac == nil {
				ac = &active{activeAt: now, a: &alert.Alert{Labels: res.labels, Fingerprint: fp, StartsAt: now, State: alert.StatePending}}
				g.active[fp] = ac
				if o.forDur <= 0 {
					ac.a.State = alert.StateFiring
				}
				ac.a.Annotations, ac.a.Value = res.annotations, res.value
				changed = append(changed, clone(ac.a))
				if ac.a.State == alert.StateFiring {
					send = append(send, firingCopy(ac, now, valid))
				}
				continue
			}
			ac.a.Annotations, ac.a.Value = res.annotations, res.value
			ac.keepFiringSince = time.Time{}
			ac.restored, ac.ending = false, false
			switch {
			case ac.a.State == alert.StatePending && now.Sub(ac.activeAt) >= o.forDur:
				// StartsAt becomes the time it fired, as Prometheus sends
				// it (FiredAt): pending alerts are never sent.
				ac.a.State, ac.a.StartsAt = alert.StateFiring, now
				changed = append(changed, clone(ac.a))
				send = append(send, firingCopy(ac, now, valid))
			case ac.a.State == alert.StateFiring && now.Sub(ac.lastSent) >= d.cfg.ResendInterval:
				send = append(send, firingCopy(ac, now, valid))
			}
		}
		if o.failed {
			continue // an error is not evidence that the alerts ended
		}
		for _, fp := range sortedKeys(g.active) {
			if _, ok := o.results[fp]; ok {
				continue
			}
			ac := g.active[fp]
			if ac.restored && now.Before(d.restoredAt.Add(o.over)) {
				// Restored by a restart and not confirmed since: while
				// the rule's range refills it is no evidence that the
				// episode ended. It stays, resent as due, so
				// Alertmanager does not resolve it either.
				if ac.a.State == alert.StateFiring && now.Sub(ac.lastSent) >= d.cfg.ResendInterval {
					send = append(send, firingCopy(ac, now, valid))
				}
				continue
			}
			if ac.a.State == alert.StateFiring && o.keepFiringFor > 0 {
				if ac.keepFiringSince.IsZero() {
					ac.keepFiringSince = now
				}
				if now.Sub(ac.keepFiringSince) < o.keepFiringFor {
					if now.Sub(ac.lastSent) >= d.cfg.ResendInterval {
						send = append(send, firingCopy(ac, now, valid))
					}
					continue
				}
			}
			if ac.a.State == alert.StateFiring {
				ended = append(ended, endedAlert{key: o.key, kind: o.kind, name: o.name, saved: saveAlert(ac)})
				if ac.restored && ac.lastSent.IsZero() {
					// Restored, and not sent since: the state is saved
					// before the notification is written, and a kill in
					// between leaves an alert no receiver heard of.
					// Resolved alone, it would be dropped as resolved
					// before anyone heard it fire: it goes out firing
					// first (the same episode), then resolved. (Ones
					// saved as they resolved ended above.)
					send = append(send, firingCopy(ac, now, valid))
				}
			}
			c, s := end(ac, now)
			changed = append(changed, c)
			if s != nil {
				send = append(send, s)
			}
			delete(g.active, fp)
		}
	}
	// Rules and policies removed by a reload: resolve what they left.
	for _, key := range sortedKeys(d.groups) {
		if live[key] {
			continue
		}
		g := d.groups[key]
		for _, fp := range sortedKeys(g.active) {
			if ac := g.active[fp]; ac.a.State == alert.StateFiring {
				ended = append(ended, endedAlert{key: key, kind: g.kind, name: g.name, saved: saveAlert(ac)})
			}
			c, s := end(g.active[fp], now)
			changed = append(changed, c)
			if s != nil {
				send = append(send, s)
			}
		}
		delete(d.groups, key)
	}
	for _, a := range changed {
		d.stats.stateChanges.Add(1)
		if a.State == alert.StateFiring {
			d.stats.fired.Add(1)
		}
	}
	return changed, send, ended
}

// end resolves a firing alert or drops a pending one.
func end(ac *active, now time.Time) (changed, send *alert.Alert) {
	if ac.a.State == alert.StatePending {
		ac.a.State = alert.StateInactive
		return clone(ac.a), nil
	}
	ac.a.State = alert.StateResolved
	ac.a.EndsAt = now
	c := clone(ac.a)
	return c, clone(ac.a)
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// clone copies an alert so callers and notifiers never share the
// detector's maps.
func clone(a *alert.Alert) *alert.Alert {
	c := *a
	c.Labels = maps.Clone(a.Labels)
	c.Annotations = maps.Clone(a.Annotations)
	return &c
}

func (d *Detector) notify(ctx context.Context, alerts []*alert.Alert) error {
	if len(alerts) == 0 || d.cfg.Notifier == nil {
		return nil
	}
	d.stats.notified.Add(uint64(len(alerts)))
	retry, err := d.cfg.Notifier.Notify(ctx, alerts...)
	if err != nil {
		d.stats.notifyErrors.Add(1)
		d.log.Warn("notify_error", "alerts", len(alerts), "retry", retry, "error", err)
		return fmt.Errorf("notify %d alerts: %w", len(alerts), err)
	}
	return nil
}

// Alerts returns the alerts that are pending or firing now, sorted by
// alert name and fingerprint.
func (d *Detector) Alerts() []*alert.Alert {
	d.mu.Lock()
	defer d.mu.Unlock()
	var out []*alert.Alert
	for _, g := range d.groups {
		for _, ac := range g.active {
			out = append(out, clone(ac.a))
		}
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Name() != out[j].Name() {
			return out[i].Name() < out[j].Name()
		}
		return out[i].Fingerprint < out[j].Fingerprint
	})
	return out
}
