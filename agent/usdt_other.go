//go:build linux && !amd64

package agent

import (
	"context"
	"errors"
	"log/slog"

	"github.com/spanwatch/spanwatch/collector"
	"github.com/spanwatch/spanwatch/internal/usdt"
)

type usdtSources struct{}

func (*usdtSources) Close() error { return nil }

// attachUSDT refuses USDT sources: their BPF programs are built for
// x86-64 only.
func attachUSDT(_ context.Context, _ *collector.Collector, srcs []usdt.SpanSource, _ *slog.Logger) (*usdtSources, error) {
	if len(srcs) == 0 {
		return nil, nil
	}
	return nil, errors.New("usdt sources: this build attaches USDT probes on x86-64 only; remove the sources: section on this architecture")
}
