//go:build linux

package agent

import (
	"context"

	"github.com/spanwatch/spanwatch/collector"
	"github.com/spanwatch/spanwatch/internal/tpsource"
)

// attachTracepoints attaches the user_events: and eventheader: sources of
// the sources: section; nil when there are none. Their events need not
// exist yet: the collector attaches each when a process registers it, and
// reports sources whose events never appear.
func attachTracepoints(ctx context.Context, col *collector.Collector, srcs []tpsource.Source) (*collector.Tracepoints, error) {
	if len(srcs) == 0 {
		return nil, nil
	}
	return col.AttachTracepoints(ctx, srcs, collector.TracepointConfig{})
}
