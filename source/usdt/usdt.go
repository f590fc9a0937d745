package usdt

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/spanwatch/spanwatch/internal/symbolize"
	"github.com/spanwatch/spanwatch/internal/usdt"
	"github.com/spanwatch/spanwatch/source"
)

// A Source is the attached USDT span sources of one tracer. Its Tracer's
// methods (Sites, Stats, Map...) are at hand; Close detaches them.
type Source struct {
	*usdt.Tracer
	stopCounts func()
	stopHealth func()
	log        *slog.Logger

	mu       sync.Mutex
	reported map[int]bool // sources (by place in Hits) logged silent
}

// Attach loads the USDT object (bpf/usdt.bpf.c) beside the core, sharing
// the core's maps, and attaches every source: spans and argument metrics
// from USDT probes then reach the same aggregates, budgets and overrun
// records as spans from the SDK. Sources with labels get a label set of
// their own (Core.AllocLabelSet); names the kernel could not read are
// resolved by the tracer (Core.AddNameResolver). The caller closes the
// returned source before the collector. A source that fails to attach
// is reported and the others are kept; the error joins the failures, and
// the returned Source (non-nil unless the object did not load) must
// still be closed.
func Attach(ctx context.Context, core *source.Core, srcs []usdt.SpanSource) (*Source, error) {
	return AttachWith(ctx, core, usdt.TracerConfig{}, srcs)
}

// AttachWith is Attach with tracer options (Logger, Maps, Core, ProcRoot,
// NoUprobeMulti and LabelSet are the core's).
func AttachWith(ctx context.Context, core *source.Core, cfg usdt.TracerConfig, srcs []usdt.SpanSource) (*Source, error) {
	log := core.Logger
	cfg.Logger = log
	cfg.Maps = core.Maps
	cfg.Core = core.Kernel.Core
	cfg.ProcRoot = core.ProcRoot
	cfg.NoUprobeMulti = cfg.NoUprobeMulti || core.NoUprobeMulti
	cfg.LabelSet = core.AllocLabelSet
	tr, err := usdt.NewTracer(cfg)
	if err != nil {
		return nil, fmt.Errorf("usdt: %w", err)
	}
	core.AddNameResolver(tr.ResolveName)
	log.Info("usdt_loaded", "uprobes", tr.UprobeMethod(), "names", tr.NameMethod())
	var errs []error
	for _, s := range srcs {
		if err := tr.Add(ctx, s); err != nil {
			log.Warn("usdt_source_failed", "source", s.Describe(), "pos", s.Pos, "error", err)
			errs = append(errs, fmt.Errorf("%s: %w", s.Pos, err))
			continue
		}
		log.Info("usdt_source_attached", "source", s.Describe())
	}
	err = core.WatchInflight(source.InflightMaps{Inflight: tr.Map("usdt_inflight"), Sources: tr.Map("usdt_sources"), TaskStart: tr.Map("usdt_task_start"), TaskNames: tr.Map("usdt_task_names")})
	if err != nil {
		log.Warn("inflight_usdt_unavailable", "error", err, "effect", "USDT spans running past their budget are not sampled")
	}
	// Stacks are taken at end and single probes: their sites name the
	// frames of processes that exit before their maps are read.
	for _, site := range tr.Sites() {
		if site.Role == "end" || site.Role == "single" {
			core.AddAnchor(symbolize.Anchor{Path: site.Path, Addr: site.Probe.Address})
		}
	}
	s := &Source{Tracer: tr, log: log}
	s.stopCounts = core.AddCounts(s.Counts)
	if core.AddHealth != nil {
		s.stopHealth = core.AddHealth(s.Health)
	}
	return s, errors.Join(errs...)
}

// Kind is "usdt".
func (s *Source) Kind() string { return "usdt" }

// Counts returns the tracer's health counters since it loaded, keyed
// "usdt/REASON": ends without an open start (unpaired_end), starts that
// overwrote a thread's oldest open span (nest_overflow), starts lost for
// want of task storage (no_storage), placeholder names lost or unread
// (name_req_drops, name_failures), and label values keyed "other"
// (label_other, label_full, label_unread). Only nonzero counts.
func (s *Source) Counts() (map[string]uint64, error) {
	st, err := s.Stats()
	if err != nil {
		return nil, err
	}
	out := map[string]uint64{}
	for k, v := range map[string]uint64{
		"unpaired_end": st.Unpaired, "nest_overflow": st.NestOverflow, "no_storage": st.NoStorage,
		"name_req_drops": st.NameReqDrops, "name_failures": st.NameFailures,
		"label_other": st.LabelOther, "label_full": st.LabelFull, "label_unread": st.LabelUnread,
	} {
		if v != 0 {
			out["usdt/"+k] = v
		}
	}
	return out, nil
}

// Close detaches the sources and releases the tracer. It is idempotent.
func (s *Source) Close() error {
	if s.stopCounts != nil {
		s.stopCounts()
		s.stopCounts = nil
	}
	if s.stopHealth != nil {
		s.stopHealth()
		s.stopHealth = nil
	}
	return s.Tracer.Close()
}

var _ source.Source = (*Source)(nil)

// Health returns each attached source's probe hits since it attached,
// and whether it is silent: attached its SilentAfter ago and no span or
// value since (no hit, or, for a pair, only ends without a start: Ruby
// fires method__return without a TracePoint when its start-up unwinds a
// method, never method__entry). A source found silent is logged once
// (source_silent), with the runtime switch known to make its probes fire
// (silentHint).
func (s *Source) Health() ([]source.Health, error) {
	hs, err := s.Hits()
	if err != nil {
		return nil, err
	}
	now := time.Now()
	out := make([]source.Health, len(hs))
	s.mu.Lock()
	defer s.mu.Unlock()
	for i, h := range hs {
		src := h.Source
		x := source.Health{Kind: "usdt", Name: sourceName(&src), Sites: h.Sites, Hits: h.Hits, Unpaired: h.Unpaired, NestOverflow: h.NestOverflow}
		if src.Pos.Line > 0 {
			x.Declared = src.Pos.String()
		}
		if h.Hits <= h.Unpaired && src.SilentAfter > 0 && now.Sub(h.Since) >= src.SilentAfter {
			x.Silent, x.Hint = true, silentHint(&src)
			if !s.reported[i] && s.log != nil {
				if s.reported == nil {
					s.reported = map[int]bool{}
				}
				s.reported[i] = true
				hint := x.Hint
				if hint == "" {
					hint = "no runtime switch is known for these probes: is their code reached?"
				}
				s.log.Warn("source_silent", "source", src.Describe(), "pos", src.Pos, "sites", h.Sites,
					"unpaired_ends", h.Unpaired, "attached_for", now.Sub(h.Since).Round(time.Second).String(), "hint", hint)
			}
		}
		out[i] = x
	}
	return out, nil
}

// sourceName is what names a source in its health: its span or metric
// name, or the probe whose argument names its spans.
func sourceName(s *usdt.SpanSource) string {
	switch {
	case s.IsMetric():
		return s.Metric
	case s.Span != "":
		return s.SpanName()
	case s.Paired():
		return fmt.Sprintf("%s %s", s.Start, s.NameDesc())
	}
	return fmt.Sprintf("%s %s", s.Probe, s.NameDesc())
}

// silentHints are the runtime switches known to make probes fire, by
// provider and probe name prefix ("" matches every probe). Each was seen
// on the runtime Debian ships (docs/sources.md, "Silent sources").
var silentHints = []struct{ provider, prefix, hint string }{
	{"hotspot", "method__", "the JVM fires method__entry and method__return only when started with -XX:+ExtendedDTraceProbes (or -XX:+DTraceMethodProbes)"},
	{"hotspot", "object__alloc", "the JVM fires object__alloc only when started with -XX:+ExtendedDTraceProbes (or -XX:+DTraceAllocProbes)"},
	{"hotspot", "monitor__", "the JVM fires its monitor probes only when started with -XX:+ExtendedDTraceProbes (or -XX:+DTraceMonitorProbes)"},
	{"ruby", "method__", "Ruby fires method__entry only while a TracePoint on :call/:return is enabled in the process (method__return alone fires when a method's frame is unwound)"},
	{"ruby", "cmethod__", "Ruby fires its cmethod probes only while a TracePoint on :c_call/:c_return is enabled in the process"},
	{"php", "", "PHP fires its probes only with USE_ZEND_DTRACE=1 in its environment"},
}

// silentHint returns the runtime switch known to make s's probes fire,
// or "".
func silentHint(s *usdt.SpanSource) string {
	for _, r := range []usdt.ProbeRef{s.Start, s.End, s.Probe} {
		for _, h := range silentHints {
			if r.Provider == h.provider && strings.HasPrefix(r.Name, h.prefix) {
				return h.hint
			}
		}
	}
	return ""
}
