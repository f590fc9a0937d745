package detector

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/spanwatch/spanwatch/alert"
	"github.com/spanwatch/spanwatch/internal/profile"
	"github.com/spanwatch/spanwatch/policy"
	"github.com/spanwatch/spanwatch/snapshot"
)

// OverrunAlertName is the alertname of overrun alerts unless the budget
// entry's labels set another.
const OverrunAlertName = "SpanOverBudget"

// stackFrames is how many of the innermost user stack frames an overrun
// alert's "stack" annotation carries.
const stackFrames = 8

// overrunEntry is the episode of one overrun alert (one label set).
type overrunEntry struct {
	// startsAt is the episode's first overrun: every alert of the episode
	// carries it.
	startsAt time.Time
	// last is when the last alert went out; endsAt is its EndsAt: the
	// episode is open until then, as the receivers see it.
	last, endsAt time.Time
	suppressed   uint64
}

// Overrun fires an alert for one span slower than its budget, at once,
// without waiting for the next snapshot. Its labels are alertname
// (SpanOverBudget unless the budget entry says otherwise), span, process,
// the source's labels, and container, pod, unit and cgroup where known.
// Its annotations are written here, once, for every notifier: summary,
// duration and budget (in the rules' duration format), pid, tid,
// trace_id and span_id, stack (where the span's time went, then its
// innermost stackFrames application frames: profile.StackText), stack_error
// when the stack is missing or short, suppressed, and the budget entry's
// own; notify delivers them as they are. Alert.Series names the span's
// series (for links to it); the rest of the record stays in the
// snapshot's overruns.
//
// Alerts are deduplicated per label set: after one is sent, further
// overruns with the same labels within OverrunInterval are counted (and
// reported in the next alert's "suppressed" annotation) but not sent, and
// at most OverrunBurst overrun alerts go out per OverrunInterval in total.
//
// An alert lasts OverrunResolveTimeout (its EndsAt). An overrun that comes
// before the last alert of its label set has ended continues that
// episode: the alert it sends keeps the episode's StartsAt and moves
// EndsAt on, so a span that keeps overrunning is one alert in
// Alertmanager, firing since its first overrun. Overrun returns the alert
// it sent, or nil when it sent none.
func (d *Detector) Overrun(ctx context.Context, o snapshot.Overrun) (*alert.Alert, error) {
	cfg := d.rules.Load()
	entry := cfg.BudgetEntry(o.Span)
	if entry != nil && !entry.Alert {
		d.stats.overrunsIgnored.Add(1)
		return nil, nil
	}
	t := o.Time
	if t.IsZero() {
		t = d.cfg.Now()
	}
	labels := map[string]string{"alertname": OverrunAlertName, "span": o.Span}
	for k, v := range o.SourceLabels { // a source's labels (docs/sources.md)
		labels[k] = v
	}
	o.Identity.AddLabels(labels)
	if o.Comm != "" {
		// The thread's command: the process that ran this span, where
		// the cgroup's process says which one its processes all run.
		labels["process"] = o.Comm
	}
	dur := policy.MetricP99.Format(float64(o.DurationNs))
	budget := policy.MetricP99.Format(float64(o.BudgetNs))
	data := &policy.TemplateData{Value: dur, RawValue: float64(o.DurationNs), Threshold: budget, Metric: "duration", Overrun: &o}
	if err := entry.ExpandLabels(data, labels); err != nil {
		d.ruleError("budget "+entry.Span.String(), err)
	}
	addExternal(labels, d.ext.get(cfg))
	fp := alert.Fingerprint(labels)

	d.ovMu.Lock()
	e := d.ovSeen[fp]
	// Within OverrunInterval of the last alert, either side (overruns from
	// several CPUs arrive slightly out of order), the overrun is folded in.
	if e != nil && t.Sub(e.last) < d.cfg.OverrunInterval && e.last.Sub(t) < d.cfg.OverrunInterval {
		e.suppressed++
		d.ovMu.Unlock()
		d.stats.overrunsDeduped.Add(1)
		return nil, nil
	}
	if t.Sub(d.ovWindow) >= d.cfg.OverrunInterval || t.Before(d.ovWindow) {
		if d.ovWinDrop > 0 {
			d.log.Warn("overrun_alerts_limited", "dropped", d.ovWinDrop, "burst", d.cfg.OverrunBurst, "interval", d.cfg.OverrunInterval)
		}
		d.ovWindow, d.ovInWin, d.ovWinDrop = t, 0, 0
		d.gcOverruns(t)
	}
	if d.ovInWin >= d.cfg.OverrunBurst {
		d.ovWinDrop++
		d.ovMu.Unlock()
		d.stats.overrunsLimited.Add(1)
		return nil, nil
	}
	d.ovInWin++
	if e == nil || !t.Before(e.endsAt) {
		// A new episode: the first, or the last one's alert has ended.
		e = &overrunEntry{startsAt: t}
		d.ovSeen[fp] = e
		d.stats.overrunEpisodes.Add(1)
	}
	suppressed := e.suppressed
	e.last, e.endsAt, e.suppressed = t, t.Add(d.cfg.OverrunResolveTimeout), 0
	startsAt, endsAt := e.startsAt, e.endsAt
	d.ovMu.Unlock()

	// Annotations are built only for alerts that go out: in a flood, the
	// deduplicated overruns cost a fingerprint and a map lookup.
	verb := "took"
	if o.StillRunning {
		verb = "has been running for"
	}
	annotations := map[string]string{
		"summary":  fmt.Sprintf("span %s %s %s, over its %s budget", o.Span, verb, dur, budget),
		"duration": dur,
		"budget":   budget,
		"pid":      strconv.FormatUint(uint64(o.PID), 10),
		"tid":      strconv.FormatUint(uint64(o.TID), 10),
	}
	if o.TraceID != "" {
		annotations["trace_id"] = o.TraceID
	}
	if o.SpanID != "" {
		annotations["span_id"] = o.SpanID
	}
	if st := profile.StackText(&o, stackFrames); st != "" {
		annotations["stack"] = st
	} else if o.StackError != "" {
		annotations["stack"] = "(no stack: " + o.StackError + ")"
	}
	if o.StackError != "" {
		annotations["stack_error"] = o.StackError
	}
	if suppressed > 0 {
		annotations["suppressed"] = strconv.FormatUint(suppressed, 10)
	}
	if err := entry.ExpandAnnotations(data, labels, annotations); err != nil {
		d.ruleError("budget "+entry.Span.String(), err)
	}

	a := &alert.Alert{
		Labels:      labels,
		Annotations: annotations,
		State:       alert.StateFiring,
		StartsAt:    startsAt,
		EndsAt:      endsAt,
		Fingerprint: fp,
		Value:       dur,
		Series:      &alert.SeriesRef{Span: o.Span, CgroupID: o.CgroupID},
	}
	d.stats.overrunAlerts.Add(1)
	return a, d.notify(ctx, []*alert.Alert{a})
}

// gcOverruns forgets episodes whose alert has ended. Called with ovMu
// held, once per OverrunInterval.
func (d *Detector) gcOverruns(now time.Time) {
	for k, e := range d.ovSeen {
		if !now.Before(e.endsAt) && now.Sub(e.last) >= d.cfg.OverrunInterval {
			delete(d.ovSeen, k)
		}
	}
}
