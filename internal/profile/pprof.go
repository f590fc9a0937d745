package profile

import (
	"fmt"
	"strings"
	"time"

	pprof "github.com/google/pprof/profile"

	"github.com/spanwatch/spanwatch/snapshot"
)

// kernelMapping names the kernel's mapping the way perf and pprof do.
const kernelMapping = "[kernel.kallsyms]"

// Pprof builds a pprof profile of aggregated stacks: one sample per stack,
// with three values: the overruns that ended at it (end stacks), the
// in-span samples that had it, and the span time it stands for (the
// default: see Stack.Weight), so "go tool pprof -top" says where the time
// of the selected spans went. The outermost frame of every sample is the
// span's name, end stacks sit under a "[stack at span end]" frame and
// off-CPU samples end in "[off-cpu]", as in WriteFolded. Samples carry
// "span", "kind" and "comm" labels, so one profile holds several spans
// and "pprof -tagfocus span=NAME" picks one. Frames nothing could name
// become functions called "module+0xoffset", so every location has a
// name and pprof never tries to symbolize the profile again. Kernel
// frames sit above user frames, as they ran.
func Pprof(stacks []Stack, start, end time.Time) (*pprof.Profile, error) {
	p := &pprof.Profile{
		SampleType: []*pprof.ValueType{
			{Type: "overruns", Unit: "count"},
			{Type: "samples", Unit: "count"},
			{Type: "duration", Unit: "nanoseconds"},
		},
		DefaultSampleType: "duration",
		Comments:          []string{"spanwatch: where the time of spans slower than their budget went"},
	}
	if !start.IsZero() {
		p.TimeNanos = start.UnixNano()
		p.DurationNanos = max(0, end.Sub(start).Nanoseconds())
	}
	b := builder{
		p:         p,
		mappings:  map[mappingKey]*pprof.Mapping{},
		locations: map[locationKey]*pprof.Location{},
		functions: map[functionKey]*pprof.Function{},
	}
	notSampled := map[string]int64{}
	var spans []string
	for _, s := range stacks {
		duration := int64(s.Weight(ValueDuration))
		if s.notSampled(ValueDuration) {
			// The time no sample covers is the span's own [not sampled]
			// (one sample a span, after the stacks), not the end stack's
			// frames'.
			if _, ok := notSampled[s.Span]; !ok {
				spans = append(spans, s.Span)
			}
			notSampled[s.Span] += duration
			duration = 0
		}
		sample := &pprof.Sample{
			Value: []int64{int64(s.Weight(ValueCount)), int64(s.Weight(ValueSamples)), duration},
			Label: map[string][]string{"span": {s.Span}, "kind": {string(s.Kind)}},
		}
		if s.Comm != "" {
			sample.Label["comm"] = []string{s.Comm}
		}
		if s.StillRunning > 0 {
			sample.NumLabel = map[string][]int64{"still_running": {int64(s.StillRunning)}}
		}
		if s.Kind == KindOffCPU {
			sample.Location = append(sample.Location, b.pseudo(FrameOffCPU))
		}
		for _, f := range s.KernelStack {
			sample.Location = append(sample.Location, b.location([]snapshot.Frame{f}, true))
		}
		// A run of inlined frames and the frame they are inlined into
		// share an address: one location with a line each, as pprof
		// represents inlining.
		for i := 0; i < len(s.UserStack); {
			j := i
			for j < len(s.UserStack)-1 && s.UserStack[j].Inlined {
				j++
			}
			sample.Location = append(sample.Location, b.location(s.UserStack[i:j+1], false))
			i = j + 1
		}
		if len(s.UserStack)+len(s.KernelStack) == 0 {
			sample.Location = append(sample.Location, b.pseudo(FrameNoStack))
		}
		if s.Kind == KindEnd {
			sample.Location = append(sample.Location, b.pseudo(s.marker()))
		}
		sample.Location = append(sample.Location, b.pseudo(s.Span))
		p.Sample = append(p.Sample, sample)
	}
	for _, span := range spans {
		if ns := notSampled[span]; ns > 0 {
			p.Sample = append(p.Sample, &pprof.Sample{
				Value:    []int64{0, 0, ns},
				Label:    map[string][]string{"span": {span}, "kind": {"not_sampled"}},
				Location: []*pprof.Location{b.pseudo(FrameNotSampled), b.pseudo(span)},
			})
		}
	}
	if err := p.CheckValid(); err != nil {
		return nil, fmt.Errorf("build pprof profile: %w", err)
	}
	return p, nil
}

// pseudo returns the location of a frame that is no code: a span's name
// at the root, or a marker such as FrameAtEnd. It has no mapping, so pprof
// shows the name as it is.
func (b *builder) pseudo(name string) *pprof.Location {
	lk := locationKey{nil, 0, "\x01" + name}
	if l := b.locations[lk]; l != nil {
		return l
	}
	l := &pprof.Location{ID: uint64(len(b.p.Location) + 1), Line: []pprof.Line{{Function: b.function(name, "")}}}
	b.locations[lk] = l
	b.p.Location = append(b.p.Location, l)
	return l
}

type mappingKey struct{ file, buildID string }

type locationKey struct {
	mapping *pprof.Mapping
	addr    uint64
	lines   string // the functions, files and lines, innermost first
}

type functionKey struct{ name, file string }

type builder struct {
	p         *pprof.Profile
	mappings  map[mappingKey]*pprof.Mapping
	locations map[locationKey]*pprof.Location
	functions map[functionKey]*pprof.Function
}

// location returns the location of frames: one frame, or calls inlined
// into the last one, innermost first, all at one address.
func (b *builder) location(frames []snapshot.Frame, kernel bool) *pprof.Location {
	f := frames[len(frames)-1]
	module := f.Module
	if kernel {
		module = kernelMapping
	}
	var m *pprof.Mapping
	addr := f.Addr
	if module != "" {
		mk := mappingKey{module, f.BuildID}
		if m = b.mappings[mk]; m == nil {
			m = &pprof.Mapping{
				ID: uint64(len(b.p.Mapping) + 1), File: module, BuildID: f.BuildID,
				HasFunctions: true, HasFilenames: true, HasLineNumbers: true,
				HasInlineFrames: true,
			}
			b.mappings[mk] = m
			b.p.Mapping = append(b.p.Mapping, m)
		}
		if !kernel {
			// The offset is where the frame points in the module, the
			// same in every process that maps it.
			addr = f.Offset
		}
	}
	var key strings.Builder
	for _, fr := range frames {
		fmt.Fprintf(&key, "%s\x00%s\x00%d\x00", frameName(fr), fr.File, fr.Line)
	}
	lk := locationKey{m, addr, key.String()}
	if l := b.locations[lk]; l != nil {
		return l
	}
	l := &pprof.Location{ID: uint64(len(b.p.Location) + 1), Mapping: m, Address: addr}
	for _, fr := range frames {
		l.Line = append(l.Line, pprof.Line{Function: b.function(frameName(fr), fr.File), Line: int64(fr.Line)})
	}
	b.locations[lk] = l
	b.p.Location = append(b.p.Location, l)
	return l
}

func (b *builder) function(name, file string) *pprof.Function {
	fk := functionKey{name, file}
	fn := b.functions[fk]
	if fn == nil {
		fn = &pprof.Function{ID: uint64(len(b.p.Function) + 1), Name: name, SystemName: name, Filename: file}
		b.functions[fk] = fn
		b.p.Function = append(b.p.Function, fn)
	}
	return fn
}

// frameName names a frame for pprof: its function, or module+0xoffset
// (or the address) when nothing named it.
func frameName(f snapshot.Frame) string {
	if f.Function != "" {
		return f.Function
	}
	return f.String()
}

// TimeRange returns the earliest and latest overrun times.
func TimeRange(overruns []snapshot.Overrun) (start, end time.Time) {
	for _, o := range overruns {
		if start.IsZero() || o.Time.Before(start) {
			start = o.Time
		}
		if o.Time.After(end) {
			end = o.Time
		}
	}
	return start, end
}
