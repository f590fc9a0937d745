//go:build linux && amd64

package collector

import (
	"context"
	"errors"
	"fmt"

	"github.com/spanwatch/spanwatch/internal/symbolize"
	"github.com/spanwatch/spanwatch/internal/usdt"
)

// AttachUSDT loads the USDT object (bpf/usdt.bpf.c) beside the core, sharing
// the core's maps, and attaches every source: spans and argument metrics
// from USDT probes then reach the same aggregates, budgets and overrun
// records as spans from the SDK. Sources with labels get a label set of
// their own (AllocLabelSet); names the kernel could not read are resolved
// by the tracer (AddNameResolver). The caller closes the returned tracer
// before the collector. A source that fails to attach is reported and the
// others are kept; the error joins the failures.
func (c *Collector) AttachUSDT(ctx context.Context, sources []usdt.SpanSource) (*usdt.Tracer, error) {
	return c.AttachUSDTWith(ctx, usdt.TracerConfig{}, sources)
}

// AttachUSDTWith is AttachUSDT with tracer options (Logger, Maps, Core,
// ProcRoot, NoUprobeMulti and LabelSet are the collector's).
func (c *Collector) AttachUSDTWith(ctx context.Context, cfg usdt.TracerConfig, sources []usdt.SpanSource) (*usdt.Tracer, error) {
	cfg.Logger = c.log
	cfg.Maps = c.Maps()
	cfg.Core = c.facts.Core
	cfg.ProcRoot = c.cfg.ProcRoot
	cfg.NoUprobeMulti = cfg.NoUprobeMulti || c.cfg.NoUprobeMulti
	cfg.LabelSet = func(names []string, signed []bool) (uint16, error) {
		return c.AllocLabelSet(LabelSet{Names: names, Signed: signed})
	}
	tr, err := usdt.NewTracer(cfg)
	if err != nil {
		return nil, fmt.Errorf("usdt: %w", err)
	}
	c.AddNameResolver(tr.ResolveName)
	c.log.Info("usdt_loaded", "uprobes", tr.UprobeMethod(), "names", tr.NameMethod())
	var errs []error
	for _, s := range sources {
		if err := tr.Add(ctx, s); err != nil {
			c.log.Warn("usdt_source_failed", "source", s.Describe(), "pos", s.Pos, "error", err)
			errs = append(errs, fmt.Errorf("%s: %w", s.Pos, err))
			continue
		}
		c.log.Info("usdt_source_attached", "source", s.Describe())
	}
	c.watchUSDT(tr)
	// Stacks are taken at end and single probes: their sites name the
	// frames of processes that exit before their maps are read.
	for _, site := range tr.Sites() {
		if site.Role == "end" || site.Role == "single" {
			addAnchor(c.cfg, symbolize.Anchor{Path: site.Path, Addr: site.Probe.Address})
		}
	}
	return tr, errors.Join(errs...)
}
