//go:build linux

package agent

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/spanwatch/spanwatch/detector"
	"github.com/spanwatch/spanwatch/notify"
)

// registerMetrics exports the detector's, the reloader's and the
// dispatcher's counters beside the exporter's span metrics.
func (a *Agent) registerMetrics() {
	reg := a.exporter.Registry()
	det := a.det
	counter := func(name, help string, f func(detector.Stats) uint64) prometheus.Collector {
		return prometheus.NewCounterFunc(prometheus.CounterOpts{Namespace: "spanwatch", Name: name, Help: help},
			func() float64 { return float64(f(det.Stats())) })
	}
	gauge := func(name, help string, f func(detector.Stats) float64) prometheus.Collector {
		return prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: "spanwatch", Name: name, Help: help},
			func() float64 { return f(det.Stats()) })
	}
	reg.MustRegister(
		prometheus.NewCounterFunc(prometheus.CounterOpts{Namespace: "spanwatch", Name: "rule_reload_failures_total",
			Help: "Reloads of the configuration file that failed and kept the previous configuration."},
			func() float64 { return float64(a.ReloadStats().Failures) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Namespace: "spanwatch", Name: "rule_reloads_total",
			Help: "Reloads of the configuration file that applied (after the first load)."},
			func() float64 { return float64(a.ReloadStats().Reloads) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: "spanwatch", Name: "config_last_reload_successful",
			Help: "1 when the configuration file's current contents run, 0 while they are refused (an older file runs; /api/status says why)."},
			func() float64 {
				if a.ReloadStats().LastError != nil {
					return 0
				}
				return 1
			}),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: "spanwatch", Name: "config_restart_pending",
			Help: "Settings the configuration file changes that only a restart applies (GET /api/status lists them)."},
			func() float64 { return float64(len(a.PendingRestart())) }),
		counter("detector_evaluations_total", "Snapshots evaluated.", func(s detector.Stats) uint64 { return s.Evaluations }),
		counter("detector_rule_failures_total", "Rule evaluations that failed (template errors).", func(s detector.Stats) uint64 { return s.RuleErrors }),
		counter("detector_policy_failures_total", "Rego policy evaluations that failed, timeouts included.", func(s detector.Stats) uint64 { return s.PolicyErrors }),
		counter("detector_policy_timeouts_total", "Rego policies stopped at their time limit.", func(s detector.Stats) uint64 { return s.PolicyTimeouts }),
		counter("detector_policy_memory_cutoffs_total", "Rego policies stopped at their memory bound (policy_limits.memory): a builtin call that would have built more, or the heap grown past it.", func(s detector.Stats) uint64 { return s.PolicyMemoryCutOffs }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: "spanwatch", Name: "detector_policies_cut_off",
			Help: "Rego policies whose evaluations are being cut off at a limit now (GET /api/status lists them)."},
			func() float64 { return float64(len(det.PolicyCutOffs())) }),
		counter("detector_notify_errors_total", "Notifier calls that failed.", func(s detector.Stats) uint64 { return s.NotifyErrors }),
		counter("detector_overrun_alerts_total", "Overrun alerts sent.", func(s detector.Stats) uint64 { return s.OverrunAlerts }),
		counter("detector_overruns_limited_total", "Overruns not alerted: over the burst cap.", func(s detector.Stats) uint64 { return s.OverrunsLimited }),
		counter("detector_state_save_errors_total", "Saves of the alert state to the outbox that failed (retried at the next evaluation).", func(s detector.Stats) uint64 { return s.StateSaveErrors }),
		gauge("detector_state_bytes", "Size of the alert state last saved to the outbox (alerts, range history, baselines).", func(s detector.Stats) float64 { return float64(s.StateBytes) }),
		gauge("alerts_pending", "Alerts pending now.", func(s detector.Stats) float64 { return float64(s.Pending) }),
		gauge("alerts_firing", "Alerts firing now.", func(s detector.Stats) float64 { return float64(s.Firing) }),
	)
	if a.dispatcher != nil {
		reg.MustRegister(notify.NewCollector(a.dispatcher))
	}
}
