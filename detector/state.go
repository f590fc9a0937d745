package detector

import (
	"bytes"
	"encoding/binary"
	"encoding/gob"
	"errors"
	"fmt"
	"maps"
	"time"

	"github.com/spanwatch/spanwatch/alert"
	"github.com/spanwatch/spanwatch/policy"
)

// A StateStore keeps the detector's state across restarts: the agent's
// outbox (notify.Dispatcher) is one.
type StateStore interface {
	SaveState(name string, data []byte) error
	LoadState(name string) ([]byte, error)
}

// stateName is the detector's entry in its StateStore.
const stateName = "detector"

// stateVersion is the encoding's version: a state of another version is
// not restored (the detector starts fresh, as before restores existed).
const stateVersion = 1

// MaxRestoreGap is how long the agent may have been down for its state to
// be restored, as Prometheus' --rules.alert.for-outage-tolerance: a state
// older than that describes alerts Alertmanager has resolved by itself
// (their endsAt passed) and windows no range reaches.
const MaxRestoreGap = time.Hour

// DefaultSaveInterval is how often the state is saved when no alert
// changed (Config.SaveInterval); a change saves it at once.
const DefaultSaveInterval = 10 * time.Second

// savedState is the detector's state as stored: the alerts of every rule
// and policy (with their for: progress and startsAt), the range history,
// the anomaly baselines and the overrun episodes.
type savedState struct {
	Version   int
	Saved     time.Time
	Groups    []savedGroup
	Hist      savedHistory
	Baselines []savedBaseline
	Overruns  []savedOverrun
}

type savedGroup struct {
	Kind, Name string
	Alerts     []savedAlert
}

type savedAlert struct {
	Alert                                           alert.Alert
	ActiveAt, LastSent, ValidUntil, KeepFiringSince time.Time
	// Ending marks an alert the evaluation resolved, saved firing until
	// its resolved notification is written (marshalState): its firing
	// was sent before, and a restart resends only the resolved.
	Ending bool
}

type savedHistory struct {
	Seq  uint64
	Wins []savedWindow
	// The series' windows, the bulk of the state, follow the gob-encoded
	// rest in a compact encoding of their own (appendSeries), which gob
	// would encode field by field several times slower.
}

type savedWindow struct {
	Seq    uint64
	End    time.Time
	Length time.Duration
	Gap    bool
}

type savedBaseline struct {
	Key    string
	B      policy.Baseline
	Seen   time.Time
	Rule   string
	Metric policy.Metric
}

type savedOverrun struct {
	FP                     string
	StartsAt, Last, EndsAt time.Time
}

// RestoreStats says what Restore brought back.
type RestoreStats struct {
	Saved           time.Time // when the state was saved; zero: none
	Firing, Pending int
	Series, Windows int
	Baselines       int
	Overruns        int
	Skipped         string // why nothing was restored, when so
}

// marshalState encodes the state at now. ended are alerts advance resolved
// in this evaluation whose resolved notification is not sent yet: they are
// saved still firing, so that a restart before the notification goes out
// resolves (and notifies) them again. Called with evalMu held.
func (d *Detector) marshalState(now time.Time, ended []endedAlert) ([]byte, error) {
	st := savedState{Version: stateVersion, Saved: now}
	d.mu.Lock()
	for _, key := range sortedKeys(d.groups) {
		g := d.groups[key]
		sg := savedGroup{Kind: g.kind, Name: g.name}
		for _, fp := range sortedKeys(g.active) {
			sg.Alerts = append(sg.Alerts, saveAlert(g.active[fp]))
		}
		for _, e := range ended {
			if e.key == key {
				sg.Alerts = append(sg.Alerts, e.ending())
			}
		}
		st.Groups = append(st.Groups, sg)
	}
	d.mu.Unlock()
	// Ended alerts of groups that went away with a reload.
	for _, e := range ended {
		found := false
		for _, g := range st.Groups {
			if groupKey(g.Kind, g.Name) == e.key {
				found = true
			}
		}
		if !found {
			st.Groups = append(st.Groups, savedGroup{Kind: e.kind, Name: e.name, Alerts: []savedAlert{e.ending()}})
		}
	}
	h := d.hist
	st.Hist.Seq = h.seq
	for _, w := range h.wins {
		st.Hist.Wins = append(st.Hist.Wins, savedWindow{Seq: w.seq, End: w.end, Length: w.length, Gap: w.gap})
	}

	for k, be := range d.baselines {
		st.Baselines = append(st.Baselines, savedBaseline{Key: k, B: be.b, Seen: be.seen, Rule: be.rule, Metric: be.metric})
	}
	d.ovMu.Lock()
	for fp, e := range d.ovSeen {
		st.Overruns = append(st.Overruns, savedOverrun{FP: fp, StartsAt: e.startsAt, Last: e.last, EndsAt: e.endsAt})
	}
	d.ovMu.Unlock()
	var hdr bytes.Buffer
	if err := gob.NewEncoder(&hdr).Encode(&st); err != nil {
		return nil, fmt.Errorf("encode detector state: %w", err)
	}
	size := hdr.Len() + 16
	for k, sh := range h.series {
		size += len(k) + 24
		for i := range sh.wins {
			size += 40 + len(sh.wins[i].hist)
		}
	}
	out := make([]byte, 0, size)
	out = binary.AppendUvarint(out, uint64(hdr.Len()))
	out = append(out, hdr.Bytes()...)
	return appendSeries(out, h.series), nil
}

func saveAlert(ac *active) savedAlert {
	a := *ac.a
	a.Labels, a.Annotations = maps.Clone(a.Labels), maps.Clone(a.Annotations)
	return savedAlert{Alert: a, ActiveAt: ac.activeAt, LastSent: ac.lastSent, ValidUntil: ac.validUntil, KeepFiringSince: ac.keepFiringSince}
}

// endedAlert is an alert resolved in this evaluation, as it was before.
type endedAlert struct {
	key, kind, name string
	saved           savedAlert
}

// ending returns the ended alert as saved: firing, marked Ending.
func (e endedAlert) ending() savedAlert {
	s := e.saved
	s.Ending = true
	return s
}

// Restore loads the state the detector saved in its StateStore before a
// restart, so that the restart neither fires again nor resolves what was
// firing: every pending and firing alert comes back with its startsAt and
// for: progress (the time the agent was down counts, as in Prometheus),
// firing alerts are sent again at the first evaluation (the same startsAt:
// the same episode, with a new endsAt), and the range history comes back
// with the time the agent was down marked as such, so ranges reach as far
// back as before and rates count only the time observed. A state older
// than MaxRestoreGap, or of another version, is not restored. Call it
// before the first Evaluate.
func (d *Detector) Restore(now time.Time) (RestoreStats, error) {
	if d.cfg.Store == nil {
		return RestoreStats{Skipped: "no state store"}, nil
	}
	data, err := d.cfg.Store.LoadState(stateName)
	if err != nil {
		return RestoreStats{}, err
	}
	if len(data) == 0 {
		return RestoreStats{Skipped: "no saved state"}, nil
	}
	var st savedState
	hl, n := binary.Uvarint(data)
	if n <= 0 || hl > uint64(len(data)-n) {
		return RestoreStats{Skipped: "unreadable"}, errors.New("decode detector state: truncated")
	}
	if err := gob.NewDecoder(bytes.NewReader(data[n : n+int(hl)])).Decode(&st); err != nil {
		return RestoreStats{Skipped: "unreadable"}, fmt.Errorf("decode detector state: %w", err)
	}
	seriesData := data[n+int(hl):]
	rs := RestoreStats{Saved: st.Saved}
	switch gap := now.Sub(st.Saved); {
	case st.Version != stateVersion:
		rs.Skipped = fmt.Sprintf("saved by another version (%d)", st.Version)
		return rs, nil
	case gap > MaxRestoreGap:
		rs.Skipped = fmt.Sprintf("saved %s ago, more than %s", gap.Round(time.Second), MaxRestoreGap)
		return rs, nil
	case gap < 0:
		return rs, errors.New("detector state saved in the future: the clock went back")
	}
	d.evalMu.Lock()
	defer d.evalMu.Unlock()
	d.mu.Lock()
	for _, sg := range st.Groups {
		g := &group{kind: sg.Kind, name: sg.Name, active: map[string]*active{}}
		for _, sa := range sg.Alerts {
			a := sa.Alert
			ac := &active{a: &a, activeAt: sa.ActiveAt, lastSent: sa.LastSent, validUntil: sa.ValidUntil, keepFiringSince: sa.KeepFiringSince, restored: true, ending: sa.Ending}
			switch a.State {
			case alert.StateFiring:
				// Sent again at the first evaluation: Alertmanager hears
				// the same episode (the same startsAt) with a new endsAt.
				ac.lastSent = time.Time{}
				rs.Firing++
			case alert.StatePending:
				rs.Pending++
			default:
				continue
			}
			g.active[a.Fingerprint] = ac
		}
		if len(g.active) > 0 {
			d.groups[groupKey(sg.Kind, sg.Name)] = g
		}
	}
	d.mu.Unlock()
	h := newHistory()
	h.seq = st.Hist.Seq
	for _, w := range st.Hist.Wins {
		h.wins = append(h.wins, windowInfo{seq: w.Seq, end: w.End, length: w.Length, gap: w.Gap})
	}
	series, err := readSeries(seriesData)
	if err != nil {
		d.mu.Lock()
		clear(d.groups)
		d.mu.Unlock()
		return RestoreStats{Skipped: "unreadable"}, fmt.Errorf("decode detector state: %w", err)
	}
	h.series = series
	for _, sh := range series {
		rs.Windows += len(sh.wins)
	}
	rs.Series = len(h.series)
	if len(h.wins) > 0 {
		// The time the agent was down: no window covers it.
		h.seq++
		h.wins = append(h.wins, windowInfo{seq: h.seq, end: now, length: now.Sub(h.wins[len(h.wins)-1].end), gap: true})
	}
	h.recount()
	d.hist = h
	for _, sb := range st.Baselines {
		if old := d.baselines[sb.Key]; old != nil {
			old.dead = true
		}
		d.baselines[sb.Key] = &baselineEntry{b: sb.B, seen: sb.Seen, rule: sb.Rule, metric: sb.Metric}
	}
	rs.Baselines = len(st.Baselines)
	d.ovMu.Lock()
	for _, so := range st.Overruns {
		d.ovSeen[so.FP] = &overrunEntry{startsAt: so.StartsAt, last: so.Last, endsAt: so.EndsAt}
	}
	d.ovMu.Unlock()
	rs.Overruns = len(st.Overruns)
	d.restoredAt = now
	return rs, nil
}

// saveState saves the state, logging a failure (the next save tries
// again). Called with evalMu held.
func (d *Detector) saveState(now time.Time, ended []endedAlert) {
	data, err := d.marshalState(now, ended)
	if err == nil {
		err = d.cfg.Store.SaveState(stateName, data)
	}
	if err != nil {
		d.stats.stateSaveErrors.Add(1)
		d.log.Warn("state_save_failed", "error", err, "effect", "a restart now would lose the alert state since the last save")
		return
	}
	d.lastSave = now
	d.stats.stateBytes.Store(int64(len(data)))
}

// SetStore sets the StateStore (Config.Store) of a detector whose store
// exists only after it (the agent's outbox). Call it before Restore and
// the first Evaluate.
func (d *Detector) SetStore(s StateStore) {
	d.evalMu.Lock()
	d.cfg.Store = s
	d.evalMu.Unlock()
}

// appendSeries encodes the series' windows: for each series its key and
// lastSeen, then each window's fields as varints and its packed
// histogram.
func appendSeries(b []byte, series map[string]*seriesHist) []byte {
	b = binary.AppendUvarint(b, uint64(len(series)))
	for k, sh := range series {
		b = binary.AppendUvarint(b, uint64(len(k)))
		b = append(b, k...)
		b = binary.AppendUvarint(b, sh.lastSeen)
		b = binary.AppendUvarint(b, uint64(len(sh.wins)))
		for i := range sh.wins {
			w := &sh.wins[i]
			for _, v := range [...]uint64{w.seq, w.Count, w.Errors, w.Sum, w.OverBudget, w.Min, w.Max} {
				b = binary.AppendUvarint(b, v)
			}
			b = binary.AppendVarint(b, int64(w.histFirst))
			b = binary.AppendVarint(b, int64(w.histLast))
			flag := uint64(len(w.hist)) << 1
			if w.noHist {
				flag |= 1
			}
			b = binary.AppendUvarint(b, flag)
			b = append(b, w.hist...)
		}
	}
	return b
}

// readSeries decodes what appendSeries wrote; damage is an error, never a
// panic or an allocation larger than the data.
func readSeries(b []byte) (map[string]*seriesHist, error) {
	bad := errors.New("range history: truncated or damaged")
	uv := func() (uint64, error) {
		v, n := binary.Uvarint(b)
		if n <= 0 {
			return 0, bad
		}
		b = b[n:]
		return v, nil
	}
	bytesN := func(n uint64) ([]byte, error) {
		if n > uint64(len(b)) {
			return nil, bad
		}
		out := b[:n:n]
		b = b[n:]
		return out, nil
	}
	n, err := uv()
	if err != nil || n > uint64(len(b)) {
		return nil, bad
	}
	out := make(map[string]*seriesHist, n)
	for range n {
		kl, err := uv()
		if err != nil {
			return nil, err
		}
		key, err := bytesN(kl)
		if err != nil {
			return nil, err
		}
		sh := &seriesHist{}
		if sh.lastSeen, err = uv(); err != nil {
			return nil, err
		}
		nw, err := uv()
		if err != nil || nw > uint64(len(b)) {
			return nil, bad
		}
		sh.wins = make([]seriesWin, nw)
		for i := range sh.wins {
			w := &sh.wins[i]
			for _, p := range [...]*uint64{&w.seq, &w.Count, &w.Errors, &w.Sum, &w.OverBudget, &w.Min, &w.Max} {
				if *p, err = uv(); err != nil {
					return nil, err
				}
			}
			for _, p := range [...]*int32{&w.histFirst, &w.histLast} {
				v, n := binary.Varint(b)
				if n <= 0 {
					return nil, bad
				}
				b = b[n:]
				*p = int32(v)
			}
			flag, err := uv()
			if err != nil {
				return nil, err
			}
			w.noHist = flag&1 != 0
			if w.hist, err = bytesN(flag >> 1); err != nil {
				return nil, err
			}
		}
		sh.key = string(key)
		out[sh.key] = sh
	}
	return out, nil
}
