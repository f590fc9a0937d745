//go:build linux

package agent

import (
	"cmp"
	"log/slog"

	"github.com/spanwatch/spanwatch/collector"
	"github.com/spanwatch/spanwatch/config"
	"github.com/spanwatch/spanwatch/internal/memory"
)

// collectorConfig turns the collector: settings into the collector's
// configuration, with the sizes the memory plan gives where the settings
// leave them out (the plan holds the settings when they are given).
func collectorConfig(s config.CollectorSettings, p memory.Plan, log *slog.Logger) collector.Config {
	cfg := collector.Config{
		Logger:                 log,
		ForceKprobe:            s.ForceKprobe,
		NoUprobeMulti:          s.NoUprobeMulti,
		MaxSeries:              cmp.Or(s.MaxSeries, p.MaxSeries),
		HistogramCells:         cmp.Or(s.HistogramCells, p.HistogramCells),
		SeriesQuota:            s.SeriesQuota,
		RingbufBytes:           s.RingbufBytes,
		OverrunQueue:           cmp.Or(s.OverrunQueue, p.OverrunQueue),
		MaxOverrunsPerSnapshot: p.MaxOverrunsPerSnapshot,
		SymbolMemory:           int64(p.SymbolCacheBytes),
		MarkerBinaries:         s.Binaries,
		ScanInterval:           s.ScanInterval,
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
