package detector

import (
	"sync/atomic"
	"time"

	"github.com/spanwatch/spanwatch/alert"
)

type counters struct {
	evaluations         atomic.Uint64
	ruleEvaluations     atomic.Uint64
	ruleErrors          atomic.Uint64
	policyEvaluations   atomic.Uint64
	policyErrors        atomic.Uint64
	policyTimeouts      atomic.Uint64
	policyMemoryCutOffs atomic.Uint64
	stateChanges        atomic.Uint64
	fired               atomic.Uint64
	notified            atomic.Uint64
	notifyErrors        atomic.Uint64
	overrunAlerts       atomic.Uint64
	overrunEpisodes     atomic.Uint64
	overrunsDeduped     atomic.Uint64
	overrunsLimited     atomic.Uint64
	overrunsIgnored     atomic.Uint64
	lastEvalNs          atomic.Int64
	historyBytes        atomic.Int64
	historyDropped      atomic.Uint64
	historyCovered      atomic.Int64
	historyWanted       atomic.Int64
	historyTrimSince    atomic.Int64
	historyDepthSince   atomic.Int64
	stateSaveErrors     atomic.Uint64
	stateBytes          atomic.Int64
}

// Stats are the detector's counters since New; the metrics endpoint
// exports them.
type Stats struct {
	Evaluations         uint64 // Evaluate calls
	RuleEvaluations     uint64 // one rule over one snapshot
	RuleErrors          uint64 // rule evaluations with a template error
	PolicyEvaluations   uint64 // one policy over one snapshot
	PolicyErrors        uint64 // failed policy evaluations, timeouts included
	PolicyTimeouts      uint64 // policies stopped at their time limit
	PolicyMemoryCutOffs uint64 // policies stopped at their memory bound
	StateChanges        uint64 // alerts returned by Evaluate
	Fired               uint64 // transitions to firing
	Notified            uint64 // alerts handed to the notifier
	NotifyErrors        uint64 // notifier calls that failed
	OverrunAlerts       uint64 // overrun alerts sent
	OverrunEpisodes     uint64 // overrun alerts with a new StartsAt (a label set's first, or after the last ended)
	OverrunsDeduped     uint64 // overruns folded into a recent alert of the same span
	OverrunsLimited     uint64 // overruns dropped by the OverrunBurst cap
	OverrunsIgnored     uint64 // overruns whose budget says alert: false
	Pending, Firing     int    // alerts in each state now
	Baselines           int    // anomaly baselines kept (-1 while an evaluation holds them)
	LastEvaluation      time.Duration
	// HistoryBytes is the memory the range history holds;
	// HistoryDropped counts the windows its bound dropped before their
	// range was done with them; HistoryCovered is the time its windows
	// cover, against HistoryWanted, the rule set's longest range.
	HistoryBytes                  int64
	HistoryDropped                uint64
	HistoryCovered, HistoryWanted time.Duration
	// HistoryTrimmedSince is when the range history began to keep each
	// series' windows only as far back as its own rules reach (zero when
	// it does not), HistoryDepthSince when its bound began to drop whole
	// windows (zero when the last evaluation dropped none).
	HistoryTrimmedSince, HistoryDepthSince time.Time
	StateSaveErrors                        uint64 // state saves (Config.Store) that failed
	StateBytes                             int64  // the size of the last state saved
}

// Stats returns a snapshot of the counters.
func (d *Detector) Stats() Stats {
	s := Stats{
		Evaluations:         d.stats.evaluations.Load(),
		RuleEvaluations:     d.stats.ruleEvaluations.Load(),
		RuleErrors:          d.stats.ruleErrors.Load(),
		PolicyEvaluations:   d.stats.policyEvaluations.Load(),
		PolicyErrors:        d.stats.policyErrors.Load(),
		PolicyTimeouts:      d.stats.policyTimeouts.Load(),
		PolicyMemoryCutOffs: d.stats.policyMemoryCutOffs.Load(),
		StateChanges:        d.stats.stateChanges.Load(),
		Fired:               d.stats.fired.Load(),
		Notified:            d.stats.notified.Load(),
		NotifyErrors:        d.stats.notifyErrors.Load(),
		OverrunAlerts:       d.stats.overrunAlerts.Load(),
		OverrunEpisodes:     d.stats.overrunEpisodes.Load(),
		OverrunsDeduped:     d.stats.overrunsDeduped.Load(),
		OverrunsLimited:     d.stats.overrunsLimited.Load(),
		OverrunsIgnored:     d.stats.overrunsIgnored.Load(),
		LastEvaluation:      time.Duration(d.stats.lastEvalNs.Load()),
		HistoryBytes:        d.stats.historyBytes.Load(),
		HistoryDropped:      d.stats.historyDropped.Load(),
		HistoryCovered:      time.Duration(d.stats.historyCovered.Load()),
		HistoryWanted:       time.Duration(d.stats.historyWanted.Load()),
		HistoryTrimmedSince: fromUnixNanos(d.stats.historyTrimSince.Load()),
		HistoryDepthSince:   fromUnixNanos(d.stats.historyDepthSince.Load()),
		StateSaveErrors:     d.stats.stateSaveErrors.Load(),
		StateBytes:          d.stats.stateBytes.Load(),
	}
	d.mu.Lock()
	for _, g := range d.groups {
		for _, ac := range g.active {
			switch ac.a.State {
			case alert.StatePending:
				s.Pending++
			case alert.StateFiring:
				s.Firing++
			}
		}
	}
	d.mu.Unlock()
	if d.evalMu.TryLock() {
		s.Baselines = len(d.baselines)
		d.evalMu.Unlock()
	} else {
		s.Baselines = -1 // an evaluation is running; not known without waiting
	}
	return s
}

func fromUnixNanos(n int64) time.Time {
	if n == 0 {
		return time.Time{}
	}
	return time.Unix(0, n)
}
