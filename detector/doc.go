// Package detector evaluates spanwatch's rules and policies over each
// snapshot and runs the alert lifecycle: an alert is pending while its rule
// holds for less than the rule's "for", firing after that, and resolved once
// the rule stops holding (after "keep_firing_for") or its series
// disappears. Alerts are identified by the fingerprint of their labels.
//
// Overruns (single spans slower than their budget) bypass the snapshot
// cycle: Detector.Overrun fires an alert at once, deduplicated per span and
// process so a flood of slow spans does not flood the webhook.
//
// Anomaly baselines and alert state live in the Detector, not in the rule
// set, so a reload (SetRules, or a Reloader watching the rule file) keeps
// them for every rule that still exists.
package detector
