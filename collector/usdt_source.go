//go:build linux && amd64

package collector

import (
	"context"
	"errors"
	"fmt"

	"github.com/spanwatch/spanwatch/internal/usdt"
)

// AttachUSDT loads the USDT object (bpf/usdt.bpf.c) beside the core, sharing
// the core's maps, and attaches every source: spans from USDT probes then
// reach the same aggregates, budgets and overrun records as spans from the
// SDK. The caller closes the returned tracer before the collector. A source
// that fails to attach is reported and the others are kept; the error joins
// the failures.
func (c *Collector) AttachUSDT(ctx context.Context, sources []usdt.SpanSource) (*usdt.Tracer, error) {
	tr, err := usdt.NewTracer(usdt.TracerConfig{
		Logger:        c.log,
		Maps:          c.Maps(),
		ProcRoot:      c.cfg.ProcRoot,
		NoUprobeMulti: c.cfg.NoUprobeMulti,
	})
	if err != nil {
		return nil, fmt.Errorf("usdt: %w", err)
	}
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
			addAnchor(c.cfg, site.Path, "", site.Probe.Address)
		}
	}
	return tr, errors.Join(errs...)
}
