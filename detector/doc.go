// Package detector evaluates spanwatch's rules and policies over each
// snapshot and runs the alert lifecycle: an alert is pending while its rule
// holds for less than the rule's "for", firing after that, and resolved once
// the rule stops holding (after "keep_firing_for") or its series
// disappears. Alerts are identified by the fingerprint of their labels,
// which include the external labels (node: the node's name, by default),
// so the same alert from two nodes stays two alerts in Alertmanager.
//
// Rules and policies see each series over their range (over:, default
// 1m): the detector keeps the windows of each series that the longest
// range reaches, adds their counts and merges their histograms bucket by
// bucket, then takes quantiles, exactly as one long window would show.
// The history counts its memory; with a bound (SetHistoryBytes, from the
// memory budget) it first keeps each series' windows only as far back as
// its own rules reach, then drops its oldest windows: ranges then cover
// less than they ask, and Stats says what they cover.
//
// Firing alerts go to the notifier when they fire and again every
// ResendInterval, each valid for 4 x max(ResendInterval, interval), as
// Prometheus sends them: Alertmanager keeps a firing alert firing while
// the resends come, and resolves it by itself if they stop.
//
// Overruns (single spans slower than their budget) bypass the snapshot
// cycle: Detector.Overrun fires an alert at once, deduplicated per span and
// process so a flood of slow spans does not flood the webhook; a span that
// keeps overrunning is one alert, with the StartsAt of its first overrun.
//
// Rego policies evaluate on PolicyWorkers goroutines under their time
// limit and, together, under one heap watch for their memory bound (the
// rule file's policy_limits:, else Config.PolicyTimeout and PolicyMemory;
// policies.go). A policy cut off at either keeps its alerts' state; the
// cut-off is logged when it begins and when the policy recovers, counted
// in Stats, and listed by PolicyCutOffs meanwhile.
//
// Anomaly baselines and alert state live in the Detector, not in the rule
// set, so a reload (SetRules, or a Reloader watching the rule file) keeps
// them for every rule that still exists.
//
// With a StateStore (the agent's outbox), they survive a restart too: the
// state (alerts with their startsAt and for: progress, the range history,
// baselines, overrun episodes) is saved before the notifications of an
// evaluation whose alerts changed, again once its resolved ones are sent,
// and otherwise every SaveInterval; Restore brings it back at start. The
// time the agent was down is a gap in the history: it ages windows out of
// a range but is not counted in its rates. Restored firing alerts are
// sent again at once with their startsAt (the same episode, a new endsAt)
// and are not resolved while their rule's range refills. One whose rule no
// longer holds at the first evaluation goes out firing, then resolved (a
// kill before its notification was written left it unheard), unless it was
// saved as it resolved: then resolved alone, its firing sent before.
package detector
