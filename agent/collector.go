//go:build linux

package agent

import (
	"log/slog"

	"github.com/spanwatch/spanwatch/collector"
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
