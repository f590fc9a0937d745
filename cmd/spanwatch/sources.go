//go:build linux

package main

import (
	"context"
	"log/slog"

	"github.com/spanwatch/spanwatch/collector"
	"github.com/spanwatch/spanwatch/collector/usdt"
	"github.com/spanwatch/spanwatch/policy"
)

// attachUSDT attaches the USDT span sources of the rule file's sources:
// section to the collector's aggregation core. It returns nil when there
// are none.
func attachUSDT(ctx context.Context, col *collector.Collector, rules *policy.Config, log *slog.Logger) (*usdt.Tracer, error) {
	if rules.Sources.Kind == 0 {
		return nil, nil
	}
	srcs, err := usdt.ParseSources(rules.Name, &rules.Sources)
	if err != nil {
		return nil, err
	}
	if len(srcs) == 0 {
		return nil, nil
	}
	t, err := usdt.NewTracer(usdt.TracerConfig{Logger: log, Maps: col.Maps()})
	if err != nil {
		return nil, err
	}
	for _, s := range srcs {
		if err := t.Add(ctx, s); err != nil {
			t.Close()
			return nil, err
		}
		log.Info("usdt_source_attached", "source", s.Describe())
	}
	return t, nil
}
