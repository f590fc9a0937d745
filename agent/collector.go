//go:build linux

package agent

import (
	"log/slog"
	"time"

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
		RingbufBytes:   s.RingbufBytes,
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

// applyBudgets pushes the rule file's budgets into the kernel: exact names
// at once, globs as span names appear.
func applyBudgets(col *collector.Collector, rules *policy.Config) error {
	var exact []string
	for _, b := range rules.Budgets {
		if n, ok := b.Span.Exact(); ok {
			exact = append(exact, n)
		}
	}
	return col.SetBudgetFunc(func(span string) (time.Duration, bool, bool) {
		b := rules.BudgetEntry(span)
		if b == nil {
			return 0, false, false
		}
		return b.Budget, false, true
	}, exact)
}
