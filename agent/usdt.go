//go:build linux && amd64

package agent

import (
	"context"
	"log/slog"

	"github.com/spanwatch/spanwatch/collector"
	"github.com/spanwatch/spanwatch/internal/inflight"
	"github.com/spanwatch/spanwatch/internal/usdt"
)

// usdtSources are the attached USDT span sources and the watcher that
// samples their spans while they run past their budgets.
type usdtSources struct {
	tracer  *usdt.Tracer
	watcher *inflight.Watcher
}

func (u *usdtSources) Close() error {
	if u.watcher != nil {
		u.watcher.Close()
	}
	return u.tracer.Close()
}

// attachUSDT attaches the USDT span sources to the collector's aggregation
// core and starts watching their in-flight spans until ctx ends. It
// returns nil when there are none. The agent fails on any source that does
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
	maps := col.Maps()
	w, err := inflight.New(inflight.Config{
		Logger:    log,
		Inflight:  t.Map("usdt_inflight"),
		Sources:   t.Map("usdt_sources"),
		TaskStart: t.Map("usdt_task_start"),
		TaskNames: t.Map("usdt_task_names"),
		Budgets:   maps["budgets"],
		Overruns:  maps["overruns"],
		Counters:  maps["counters"],
	})
	if err != nil {
		// Spans that end still alert; only hung ones go unseen.
		log.Warn("inflight_watch_unavailable", "error", err, "effect", "spans still running past their budget are not sampled")
		return &usdtSources{tracer: t}, nil
	}
	go func() {
		if err := w.Run(ctx); err != nil && ctx.Err() == nil {
			log.Warn("inflight_watch_stopped", "error", err)
		}
	}()
	return &usdtSources{tracer: t, watcher: w}, nil
}
