//go:build linux

package main

import (
	"context"
	"log/slog"

	"github.com/spanwatch/spanwatch/collector"
	"github.com/spanwatch/spanwatch/internal/usdt"
	"github.com/spanwatch/spanwatch/policy"
)

// usdtSources are the attached USDT span sources. The collector samples
// their spans while they run past their budgets (Collector.AttachUSDT).
type usdtSources struct {
	tracer *usdt.Tracer
}

func (u *usdtSources) Close() error {
	return u.tracer.Close()
}

// attachUSDT attaches the USDT span sources of the rule file's sources:
// section to the collector's aggregation core. It returns nil when there
// are none.
func attachUSDT(ctx context.Context, col *collector.Collector, rules *policy.Config, log *slog.Logger) (*usdtSources, error) {
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
	// run fails on any source that does not attach, rather than run with
	// part of what the rule file asks for.
	t, err := col.AttachUSDT(ctx, srcs)
	if err != nil {
		if t != nil {
			t.Close()
		}
		return nil, err
	}
	return &usdtSources{tracer: t}, nil
}
