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
		{"ids", running.Metrics.IDs, next.Metrics.IDs},
	} {
		if !reflect.DeepEqual(m.x, m.y) {
			out = append(out, RestartChange{Key: "metrics." + m.key, Old: show(m.x), New: show(m.y)})
		}
	}
	if !reflect.DeepEqual(running.OTLP, next.OTLP) {
		out = append(out, RestartChange{Key: "otlp", Old: describeOTLP(running.OTLP), New: describeOTLP(next.OTLP)})
	}
	out = append(out, listenerSettings.restartChanges(&running.Listener, &next.Listener)...)
	if slices.ContainsFunc(sourceKinds, func(k sourceKind) bool { return !k.same(running, next) }) {
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
	for _, k := range sourceKinds {
		k.keep(&out, running)
	}
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

// sourceKinds are the rule file's kinds of source: a new kind is one line
// here. A change to any of them takes a restart.
var sourceKinds = []sourceKind{
	sourceSection[usdt.SpanSource]{func(c *Config) *[]usdt.SpanSource { return &c.Sources }, func(s *usdt.SpanSource) { s.Pos = section.Pos{} }, (*usdt.SpanSource).Describe},
	sourceSection[tpsource.Source]{func(c *Config) *[]tpsource.Source { return &c.Tracepoints }, func(s *tpsource.Source) { s.Pos = section.Pos{} }, (*tpsource.Source).Describe},
	sourceSection[function.Target]{func(c *Config) *[]function.Target { return &c.Functions }, func(t *function.Target) { t.Declared = "" }, (*function.Target).Describe},
}

type sourceKind interface {
	same(a, b *Config) bool      // the same sources, wherever the file places them
	keep(out, running *Config)   // out takes running's sources
	describe(c *Config) []string // each source, for a restart message
}

// A sourceSection is one kind of source: where a Config holds them, how to forget
// a source's place in the file (moving it changes nothing), and how one
// is described.
type sourceSection[T any] struct {
	list      func(*Config) *[]T
	unplace   func(*T)
	describe1 func(*T) string
}

func (k sourceSection[T]) same(a, b *Config) bool {
	return slices.EqualFunc(*k.list(a), *k.list(b), func(x, y T) bool {
		k.unplace(&x)
		k.unplace(&y)
		return reflect.DeepEqual(x, y)
	})
}

func (k sourceSection[T]) keep(out, running *Config) { *k.list(out) = *k.list(running) }

func (k sourceSection[T]) describe(c *Config) []string {
	var out []string
	for i := range *k.list(c) {
		out = append(out, k.describe1(&(*k.list(c))[i]))
	}
	return out
}

func describeSources(c *Config) string {
	var names []string
	for _, k := range sourceKinds {
		names = append(names, k.describe(c)...)
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
	if c.Profiles {
		return c.Endpoint + " (logs and profiles)"
	}
	return c.Endpoint
}
