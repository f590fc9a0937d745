package tracepoint

import (
	"fmt"
	"sync"

	"github.com/spanwatch/spanwatch/bpf"
	"github.com/spanwatch/spanwatch/config/section"
	"github.com/spanwatch/spanwatch/internal/tpsource"
)

// This file builds on every system: the limits of tracepoint sources that
// the kernel objects' maps set, checked by Attach before it
// writes them and, through config.Load, by spanwatch check, with the same
// function.

// tpLimits reads the sizes of the maps that hold tracepoint sources from
// the objects themselves (no kernel needed): user_events sources are
// indexed by their place among all tracepoint sources in ue_sources, and
// EventHeader sources take one mapping each in eh_mappings (two for a
// start/end pair).
var tpLimits = sync.OnceValues(func() (ueSources, ehMappings int) {
	if spec, err := bpf.LoadUserevents(); err == nil && spec.Maps["ue_sources"] != nil {
		ueSources = int(spec.Maps["ue_sources"].MaxEntries)
	}
	if spec, err := bpf.LoadEventheader(); err == nil && spec.Maps["eh_mappings"] != nil {
		ehMappings = int(spec.Maps["eh_mappings"].MaxEntries)
	}
	return ueSources, ehMappings
})

// at is an error at a source's position in the configuration file.
func at(p section.Pos, format string, a ...any) error {
	return &section.Error{File: p.File, Line: p.Line, Col: p.Col, Msg: fmt.Sprintf(format, a...)}
}

// CheckTracepointSources reports the sources the kernel's maps cannot
// hold, each at its position (a *section.Error): a user_events source past the size of
// ue_sources (its index is its place among all tracepoint sources), and
// EventHeader sources past the mappings eh_mappings holds.
func CheckTracepointSources(srcs []tpsource.Source) []error {
	ueMax, ehMax := tpLimits()
	var errs []error
	mappings := 0
	for i := range srcs {
		s := &srcs[i]
		switch s.Kind {
		case tpsource.UserEvents:
			if ueMax > 0 && i >= ueMax {
				errs = append(errs, at(s.Pos, "source %d: the kernel holds %d tracepoint sources (user_events sources must be among the first %d)", i+1, ueMax, ueMax))
			}
		case tpsource.EventHeader:
			n := 1
			if !s.SpanEvents() && s.Paired() {
				n = 2
			}
			if mappings += n; ehMax > 0 && mappings > ehMax && mappings-n < ehMax+1 {
				errs = append(errs, at(s.Pos, "more than %d EventHeader event mappings (one per source, two for a start/end pair): the kernel holds %d", ehMax, ehMax))
			}
		}
	}
	return errs
}
