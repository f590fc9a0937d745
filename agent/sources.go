//go:build linux

package agent

import (
	"context"

	"github.com/spanwatch/spanwatch/source/function"
	"github.com/spanwatch/spanwatch/source/tracepoint"

	"github.com/spanwatch/spanwatch/collector"
	"github.com/spanwatch/spanwatch/config"
	"github.com/spanwatch/spanwatch/source"
	usdtsource "github.com/spanwatch/spanwatch/source/usdt"
)

// sourceKinds are the span sources the agent attaches to the collector's
// core, each from its section of the configuration (sources:), in this
// order; each returns nil when the configuration declares none of its
// kind. A new kind of source is its package (see package source) and one
// line here. The agent fails on any source that does not attach, rather
// than run with part of what the file asks for. (The SDKs' marker and
// user_event, source/marker and source/sdkevent, are built in to the
// core's object: collector.New attaches them, as collector.sources
// chooses.)
var sourceKinds = []func(ctx context.Context, col *collector.Collector, cfg *config.Config) (source.Source, error){
	// USDT probes; the collector's in-flight sampler watches their spans
	// too.
	func(ctx context.Context, col *collector.Collector, cfg *config.Config) (source.Source, error) {
		if len(cfg.Sources) == 0 {
			return nil, nil
		}
		return closeOnError(usdtsource.Attach(ctx, col.SourceCore(), cfg.Sources))
	},
	// user_events and EventHeader tracepoints. Their events need not exist
	// yet: each is attached when a process registers it, and sources whose
	// events never appear are reported.
	func(ctx context.Context, col *collector.Collector, cfg *config.Config) (source.Source, error) {
		if len(cfg.Tracepoints) == 0 {
			return nil, nil
		}
		return closeOnError(tracepoint.Attach(ctx, col.SourceCore(), cfg.Tracepoints, tracepoint.Config{}))
	},
	// Functions of any binary: uprobes on their entries and returns.
	func(ctx context.Context, col *collector.Collector, cfg *config.Config) (source.Source, error) {
		if len(cfg.Functions) == 0 {
			return nil, nil
		}
		return closeOnError(function.Attach(ctx, col.SourceCore(), cfg.Functions))
	},
}

// attachSources attaches every kind of source the configuration declares;
// on an error, those attached are closed. The caller closes the returned
// sources before the collector.
func attachSources(ctx context.Context, col *collector.Collector, cfg *config.Config) ([]source.Source, error) {
	var out []source.Source
	for _, kind := range sourceKinds {
		s, err := kind(ctx, col, cfg)
		if err != nil {
			for i := len(out) - 1; i >= 0; i-- {
				out[i].Close()
			}
			return nil, err
		}
		if s != nil {
			out = append(out, s)
		}
	}
	return out, nil
}

// closeOnError turns what an attacher returned into a source.Source, and
// closes a partial attach on an error.
func closeOnError[S source.Source](s S, err error) (source.Source, error) {
	if err != nil {
		var zero S
		if any(s) != any(zero) {
			s.Close()
		}
		return nil, err
	}
	return s, nil
}
