//go:build linux

package agent

import (
	"log/slog"

	"github.com/spanwatch/spanwatch/collector"
	"github.com/spanwatch/spanwatch/policy"
)

// collectorConfig turns the collector: settings into the collector's
// configuration.
func collectorConfig(s CollectorSettings, log *slog.Logger) collector.Config {
	cfg := collector.Config{
		Logger:         log,
		ForceKprobe:    s.ForceKprobe,
		NoUprobeMulti:  s.NoUprobeMulti,
		MaxSeries:      s.MaxSeries,
		HistogramCells: s.HistogramCells,
		SeriesQuota:    s.SeriesQuota,
		RingbufBytes:   s.RingbufBytes,
		OverrunQueue:   s.OverrunQueue,
		MarkerBinaries: s.Binaries,
		ScanInterval:   s.ScanInterval,
	}
	for _, src := range s.Sources {
		switch src {
		case "user_events":
			cfg.Sources.UserEvents = true
		case "marker":
			cfg.Sources.Marker = true
		}
	}
	return cfg
}

// applyBudgets pushes the configuration's budgets into the kernel, in
// file order (exact names win over globs; among globs the first wins).
func applyBudgets(col *collector.Collector, rules *policy.Config) error {
	return col.SetBudgets(budgetRules(rules))
}
