package config

import (
	"fmt"
	"reflect"
	"slices"
	"strings"

	"github.com/spanwatch/spanwatch/config/section"
	"github.com/spanwatch/spanwatch/internal/tpsource"
	"github.com/spanwatch/spanwatch/internal/usdt"
	"github.com/spanwatch/spanwatch/otlp"
	"github.com/spanwatch/spanwatch/source/function"
)

// restartChanges lists what differs between the running configuration
// and next that a reload cannot apply: the collector: settings that are
// not live (all but interval), the metrics:, otlp: and listener: sections, the
// sources, the outbox's path, webhooks where none ran (no dispatcher was
// started), and no webhooks where some ran.
func restartChanges(running, next *Config) []RestartChange {
	out := collectorSettings.restartChanges(&running.Collector, &next.Collector)
	for _, m := range []struct {
		key  string
		x, y any
	}{
		{"buckets", running.Metrics.Bounds, next.Metrics.Bounds},
		{"native_histograms", !running.Metrics.NoNativeHistograms, !next.Metrics.NoNativeHistograms},
		{"exemplars", !running.Metrics.NoExemplars, !next.Metrics.NoExemplars},
		{"series_ttl", running.Metrics.SeriesTTL, next.Metrics.SeriesTTL},
		{"names", running.Metrics.Names, next.Metrics.Names},
	} {
		if !reflect.DeepEqual(m.x, m.y) {
			out = append(out, RestartChange{Key: "metrics." + m.key, Old: show(m.x), New: show(m.y)})
		}
	}
	if !reflect.DeepEqual(running.OTLP, next.OTLP) {
		out = append(out, RestartChange{Key: "otlp", Old: describeOTLP(running.OTLP), New: describeOTLP(next.OTLP)})
	}
	out = append(out, listenerSettings.restartChanges(&running.Listener, &next.Listener)...)
	if !sameSources(running.Sources, next.Sources) || !sameTracepoints(running.Tracepoints, next.Tracepoints) ||
		!sameFunctions(running.Functions, next.Functions) {
		out = append(out, RestartChange{Key: "sources", Old: describeSources(running), New: describeSources(next)})
	}
	switch {
	case running.Notify == nil && next.Notify != nil:
		out = append(out, RestartChange{Key: "webhooks", Old: "none", New: fmt.Sprintf("%d webhooks", len(next.Notify.Webhooks))})
	case running.Notify != nil && next.Notify == nil:
		// The section is gone: the running webhooks keep delivering (the
		// alerts they hold, and the resolved notifications of those that
		// fire now) until a restart. A file truncated by an editor does
		// not silence every alert.
		out = append(out, RestartChange{Key: "webhooks", Old: fmt.Sprintf("%d webhooks", len(running.Notify.Webhooks)), New: "none"})
	case running.Notify != nil && next.Notify != nil && running.Notify.Routing.Outbox.Path != next.Notify.Routing.Outbox.Path:
		out = append(out, RestartChange{Key: "routing.outbox.path", Old: running.Notify.Routing.Outbox.Path, New: next.Notify.Routing.Outbox.Path})
	}
	return out
}

// keepRunning returns next with the settings of changes taken from
// running: what a reload applies when some of the file needs a restart.
func keepRunning(running, next *Config, changes []RestartChange) *Config {
	if len(changes) == 0 {
		return next
	}
	out := *next
	out.Collector = collectorSettings.keepRunning(running.Collector, next.Collector)
	out.Listener = listenerSettings.keepRunning(running.Listener, next.Listener)
	out.Sources = running.Sources
	out.Tracepoints = running.Tracepoints
	out.Functions = running.Functions
	out.Metrics = running.Metrics
	out.OTLP = running.OTLP
	switch {
	case running.Notify == nil:
		out.Notify = nil
	case next.Notify == nil:
		out.Notify = running.Notify
	default:
		n := *next.Notify
		n.Routing.Outbox.Path = running.Notify.Routing.Outbox.Path
		out.Notify = &n
	}
	return &out
}

func sameSources(a, b []usdt.SpanSource) bool {
	return slices.EqualFunc(a, b, func(x, y usdt.SpanSource) bool {
		x.Pos, y.Pos = section.Pos{}, section.Pos{} // moving a source in the file changes nothing
		return reflect.DeepEqual(x, y)
	})
}

func sameTracepoints(a, b []tpsource.Source) bool {
	return slices.EqualFunc(a, b, func(x, y tpsource.Source) bool {
		x.Pos, y.Pos = section.Pos{}, section.Pos{}
		return reflect.DeepEqual(x, y)
	})
}

func sameFunctions(a, b []function.Target) bool {
	return slices.EqualFunc(a, b, func(x, y function.Target) bool {
		x.Declared, y.Declared = "", ""
		return reflect.DeepEqual(x, y)
	})
}

func describeSources(c *Config) string {
	var names []string
	for i := range c.Sources {
		names = append(names, c.Sources[i].Describe())
	}
	for i := range c.Tracepoints {
		names = append(names, c.Tracepoints[i].Describe())
	}
	for i := range c.Functions {
		names = append(names, c.Functions[i].Describe())
	}
	if len(names) == 0 {
		return "none"
	}
	return strings.Join(names, "; ")
}

// describeOTLP says where an otlp: section sends records, for a restart
// message (headers and the token file are not shown).
func describeOTLP(c *otlp.Config) string {
	if c == nil {
		return "none"
	}
	return c.Endpoint
}
