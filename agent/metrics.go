//go:build linux

package agent

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/spanwatch/spanwatch/detector"
	"github.com/spanwatch/spanwatch/internal/memory"
	"github.com/spanwatch/spanwatch/notify"
	"github.com/spanwatch/spanwatch/otlp"
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
	if a.otlp != nil {
		reg.MustRegister(otlpCollector{a.otlp})
	}
	reg.MustRegister(
		gauge("range_history_bytes", "Memory the range history holds (bounded by the memory budget).", func(s detector.Stats) float64 { return float64(s.HistoryBytes) }),
		counter("range_history_windows_dropped_total", "Windows the range history's memory bound dropped before their range was done with them.", func(s detector.Stats) uint64 { return s.HistoryDropped }),
		gauge("range_history_covered_seconds", "Time the range history's windows cover: less than spanwatch_range_history_wanted_seconds while its bound keeps fewer.", func(s detector.Stats) float64 { return s.HistoryCovered.Seconds() }),
		gauge("range_history_wanted_seconds", "The longest range of the rules and policies.", func(s detector.Stats) float64 { return s.HistoryWanted.Seconds() }),
		(*memoryCollector)(a),
	)
}

// memoryCollector exports the memory budget: the budget and where it
// came from, what the agent uses, and what it sheds and since when.
type memoryCollector Agent

var (
	memBudgetDesc = prometheus.NewDesc("spanwatch_memory_budget_bytes",
		"The memory the agent may use (collector.memory_budget, --memory-budget, else the cgroup's limit, else a default); source says which.", []string{"source"}, nil)
	memGoLimitDesc = prometheus.NewDesc("spanwatch_memory_go_limit_bytes",
		"Go's soft memory limit: the budget less the BPF maps and the binary.", nil, nil)
	memUsageDesc = prometheus.NewDesc("spanwatch_memory_usage_bytes",
		"The agent's memory by part, measured every second: go (live heap, stacks, runtime), bpf_maps (what the kernel charges), binary (resident code), cgroup (the memory of the cgroup whose limit set the budget, less its inactive file pages).", []string{"part"}, nil)
	memShedDesc = prometheus.NewDesc("spanwatch_memory_shed",
		"1 while the agent sheds this detail to stay in its memory budget (in order: stack_detail, unused_range_history, stale_exports, range_history_depth), else 0. Counts are never shed.", []string{"detail"}, nil)
	memShedSinceDesc = prometheus.NewDesc("spanwatch_memory_shed_since_timestamp_seconds",
		"When the agent began to shed this detail (present only while it does), Unix time.", []string{"detail"}, nil)
	memShedLevelDesc = prometheus.NewDesc("spanwatch_memory_shed_level",
		"How many details the agent sheds now (0 to 4).", nil, nil)
	memShedChangesDesc = prometheus.NewDesc("spanwatch_memory_shed_changes_total",
		"Changes of the shedding level.", nil, nil)
	memCapacityDesc = prometheus.NewDesc("spanwatch_memory_planned_series",
		"The series capacity the memory budget gave the kernel's maps (or the max_series setting it checked).", nil, nil)
)

func (c *memoryCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{memBudgetDesc, memGoLimitDesc, memUsageDesc, memShedDesc, memShedSinceDesc, memShedLevelDesc, memShedChangesDesc, memCapacityDesc} {
		ch <- d
	}
}

func (c *memoryCollector) Collect(ch chan<- prometheus.Metric) {
	a := (*Agent)(c)
	st := a.gov.State()
	g := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	g(memBudgetDesc, float64(a.plan.Budget.Bytes), string(a.plan.Budget.Source))
	g(memGoLimitDesc, float64(a.plan.GoLimit))
	g(memCapacityDesc, float64(a.plan.MaxSeries))
	u := st.Last
	g(memUsageDesc, float64(u.Go), "go")
	g(memUsageDesc, float64(u.BPFMaps), "bpf_maps")
	g(memUsageDesc, float64(u.Binary), "binary")
	if a.plan.Budget.Source == memory.SourceCgroup {
		// Only the cgroup whose limit is the budget: elsewhere it may
		// hold other processes than the agent.
		g(memUsageDesc, float64(u.Cgroup), "cgroup")
	}
	// The range history sheds by itself too, in the same order, when
	// it reaches its share of the budget (detector.SetHistoryBytes).
	ds := a.det.Stats()
	own := map[memory.Level]time.Time{memory.UnusedHistory: ds.HistoryTrimmedSince, memory.HistoryDepth: ds.HistoryDepthSince}
	for _, l := range memory.Levels() {
		var since time.Time
		if st.Level >= l {
			since = st.Since[l]
		}
		if t := own[l]; !t.IsZero() && (since.IsZero() || t.Before(since)) {
			since = t
		}
		on := 0.0
		if !since.IsZero() {
			on = 1
			g(memShedSinceDesc, float64(since.UnixNano())/1e9, l.String())
		}
		g(memShedDesc, on, l.String())
	}
	g(memShedLevelDesc, float64(st.Level))
	ch <- prometheus.MustNewConstMetric(memShedChangesDesc, prometheus.CounterValue, float64(st.Changes))
}

// otlpCollector exports what the OTLP exporter did with the overrun
// records: spanwatch_otlp_records_total by result, and with profiles on,
// spanwatch_otlp_profile_samples_total.
type otlpCollector struct{ e *otlp.Exporter }

var otlpRecordsDesc = prometheus.NewDesc("spanwatch_otlp_records_total",
	"Overrun records for the otlp: endpoint, by result: queued, sent, dropped (the queue was full), failed (given up after an error), rejected (refused by the endpoint in a partial success).", []string{"result"}, nil)

var otlpSamplesDesc = prometheus.NewDesc("spanwatch_otlp_profile_samples_total",
	"Overruns sent as OTLP profile samples (otlp: profiles: true), by result: sent, failed (given up after an error), rejected (the endpoint refused their profile in a partial success).", []string{"result"}, nil)

func (c otlpCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- otlpRecordsDesc
	if c.e.Profiles() {
		ch <- otlpSamplesDesc
	}
}

func (c otlpCollector) Collect(ch chan<- prometheus.Metric) {
	st := c.e.Stats()
	for _, r := range []struct {
		result string
		n      uint64
	}{{"queued", st.Queued}, {"sent", st.Sent}, {"dropped", st.Dropped}, {"failed", st.Failed}, {"rejected", st.Rejected}} {
		ch <- prometheus.MustNewConstMetric(otlpRecordsDesc, prometheus.CounterValue, float64(r.n), r.result)
	}
	if !c.e.Profiles() {
		return
	}
	p := st.ProfileSamples
	for _, r := range []struct {
		result string
		n      uint64
	}{{"sent", p.Sent}, {"failed", p.Failed}, {"rejected", p.Rejected}} {
		ch <- prometheus.MustNewConstMetric(otlpSamplesDesc, prometheus.CounterValue, float64(r.n), r.result)
	}
}
