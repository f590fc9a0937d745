package usdt

import (
	"context"
	"errors"
	"fmt"

	"github.com/spanwatch/spanwatch/internal/symbolize"
	"github.com/spanwatch/spanwatch/internal/usdt"
	"github.com/spanwatch/spanwatch/source"
)

// A Source is the attached USDT span sources of one tracer. Its Tracer's
// methods (Sites, Stats, Map...) are at hand; Close detaches them.
type Source struct {
	*usdt.Tracer
	stopCounts func()
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
	s := &Source{Tracer: tr}
	s.stopCounts = core.AddCounts(s.Counts)
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
	return s.Tracer.Close()
}

var _ source.Source = (*Source)(nil)
