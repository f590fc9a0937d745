//go:build linux && amd64

package agent

import (
	"context"
	"log/slog"

	"github.com/spanwatch/spanwatch/collector"
	"github.com/spanwatch/spanwatch/internal/usdt"
)

// usdtSources are the attached USDT span sources. The collector samples
// their spans while they run past their budgets (Collector.AttachUSDT).
type usdtSources struct {
	tracer *usdt.Tracer
}

func (u *usdtSources) Close() error {
	return u.tracer.Close()
}

// attachUSDT attaches the USDT span sources to the collector's aggregation
// core, whose in-flight sampler then watches their spans too. It returns
// nil when there are none. The agent fails on any source that does
// not attach, rather than run with part of what the file asks for.
func attachUSDT(ctx context.Context, col *collector.Collector, srcs []usdt.SpanSource, log *slog.Logger) (*usdtSources, error) {
	if len(srcs) == 0 {
		return nil, nil
	}
	t, err := col.AttachUSDT(ctx, srcs)
	if err != nil {
		if t != nil {
			t.Close()
		}
		return nil, err
	}
	return &usdtSources{tracer: t}, nil
}
