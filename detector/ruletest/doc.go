// Package ruletest runs rule unit tests, the way "promtool test rules"
// does for Prometheus: a YAML test file names a rule file, feeds a sequence
// of snapshots (written inline or recorded by "spanwatch run --output") to
// a real Detector at given evaluation times, and compares the alerts after
// chosen steps with the expected ones.
//
// The test file format (documented by schema.json, see Schema):
//
//	rule_file: rules.yaml          # relative to the test file
//	interval: 10s                  # time between steps (default 10s)
//	tests:
//	  - name: checkout p99 pages after 30s
//	    start: 2026-01-01T00:00:00Z   # time of step 0 (default 2026-01-01T00:00:00Z)
//	    steps:
//	      - series:                  # one snapshot, inline
//	          - {span: checkout, container: web-1, count: 100, p99: 250ms}
//	        repeat: 4                # the same snapshot 4 times
//	      - series:                  # spans by duration: a real histogram
//	          - {span: checkout, container: web-1, latencies: {50ms: 95, 400ms: 5}}
//	      - file: recorded.json      # JSON snapshots, one step each
//	      - series: []               # an empty window
//	        overruns:                # slow spans, fed to Detector.Overrun
//	          - {span: checkout, comm: api, duration: 300ms, budget: 250ms}
//	    expect:
//	      - at: 30s                  # or step: 3 (0-based)
//	        alerts:                  # exactly these, after that step
//	          - labels: {alertname: CheckoutSlow, span: checkout, container: web-1}
//	            annotations: {summary: "p99 is 250ms"}   # optional
//	            state: firing        # pending, firing or resolved
//
// After a step, the alerts compared are those firing, those resolved by
// that step, the overrun alerts it sent, and the pending ones: a pending
// alert an expectation names is compared (state included), but one it
// does not name is not a failure unless the expectation lists pending
// alerts itself, as promtool compares firing alerts only. Labels must
// match exactly; a missing alert is reported with the labels in which the
// closest alert of its name differs. Annotations are compared only when
// the expectation lists them. Alerts carry the rule file's
// external_labels but no node label, so a test passes on every machine.
//
// Steps are windows: a rule over a range (over:, default 1m) sees the
// steps in its range merged, as the agent does with the collector's
// windows. A recording or a series given by its latencies has histograms
// that merge exactly; a series given by its quantiles (p99: 250ms) has
// none, so over several windows each contributes its own quantile as a
// bound and the range's quantile is the largest of them.
package ruletest
