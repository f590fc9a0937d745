//go:build linux

package main

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/spanwatch/spanwatch/detector"
)

// registerAgentMetrics exports the detector's counters and the rule
// reloads, beside the exporter's span metrics.
func registerAgentMetrics(reg *prometheus.Registry, det *detector.Detector) {
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
			Help: "Reloads of the rule file that failed and kept the previous configuration."},
			func() float64 { return float64(reloadFailures.Load()) }),
		counter("detector_evaluations_total", "Snapshots evaluated.", func(s detector.Stats) uint64 { return s.Evaluations }),
		counter("detector_rule_failures_total", "Rule evaluations that failed (template errors).", func(s detector.Stats) uint64 { return s.RuleErrors }),
		counter("detector_policy_failures_total", "Rego policy evaluations that failed, timeouts included.", func(s detector.Stats) uint64 { return s.PolicyErrors }),
		counter("detector_policy_timeouts_total", "Rego policies stopped at their time limit.", func(s detector.Stats) uint64 { return s.PolicyTimeouts }),
		counter("detector_notify_errors_total", "Notifier calls that failed.", func(s detector.Stats) uint64 { return s.NotifyErrors }),
		counter("detector_overrun_alerts_total", "Overrun alerts sent.", func(s detector.Stats) uint64 { return s.OverrunAlerts }),
		counter("detector_overruns_limited_total", "Overruns not alerted: over the burst cap.", func(s detector.Stats) uint64 { return s.OverrunsLimited }),
		gauge("alerts_pending", "Alerts pending now.", func(s detector.Stats) float64 { return float64(s.Pending) }),
		gauge("alerts_firing", "Alerts firing now.", func(s detector.Stats) float64 { return float64(s.Firing) }),
	)
}
