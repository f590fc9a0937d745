package profile

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/spanwatch/spanwatch/internal/glob"
	"github.com/spanwatch/spanwatch/snapshot"
)

// Read reads overruns from r: a stream of JSON values, each either a
// snapshot.Snapshot (whose overruns are taken) or a snapshot.Overrun, one
// after another, as JSON lines or indented. That covers what "spanwatch run
// --output FILE" writes and a file of overruns alone.
func Read(r io.Reader) ([]snapshot.Overrun, error) {
	dec := json.NewDecoder(r)
	var out []snapshot.Overrun
	for n := 1; ; n++ {
		var raw json.RawMessage
		if err := dec.Decode(&raw); errors.Is(err, io.EOF) {
			return out, nil
		} else if err != nil {
			return nil, fmt.Errorf("read value %d: %w", n, err)
		}
		var probe struct {
			Version *int            `json:"version"`
			Series  json.RawMessage `json:"series"`
			Span    *string         `json:"span"`
		}
		if err := json.Unmarshal(raw, &probe); err != nil {
			return nil, fmt.Errorf("read value %d: want a snapshot or an overrun object: %w", n, err)
		}
		switch {
		case probe.Version != nil || probe.Series != nil:
			s, err := snapshot.Decode(bytes.NewReader(raw))
			if err != nil {
				return nil, fmt.Errorf("read value %d: %w", n, err)
			}
			out = append(out, s.Overruns...)
		case probe.Span != nil:
			var o snapshot.Overrun
			d := json.NewDecoder(bytes.NewReader(raw))
			d.DisallowUnknownFields()
			if err := d.Decode(&o); err != nil {
				return nil, fmt.Errorf("read value %d: decode overrun: %w", n, err)
			}
			out = append(out, o)
		default:
			return nil, fmt.Errorf("read value %d: neither a snapshot (no \"version\") nor an overrun (no \"span\")", n)
		}
	}
}

// Select returns the overruns of span name. With useGlob, name is a glob in
// the rule files' syntax (internal/glob: "checkout*", "GET /api/*",
// "!health"); without, only a span of exactly that name is selected, so a
// name with '*' or '?' in it means itself. An empty name selects all.
func Select(overruns []snapshot.Overrun, name string, useGlob bool) ([]snapshot.Overrun, error) {
	if name == "" {
		return overruns, nil
	}
	var g *glob.Glob
	if useGlob {
		var err error
		if g, err = glob.Compile(name); err != nil {
			return nil, fmt.Errorf("span glob: %w", err)
		}
	}
	var out []snapshot.Overrun
	for _, o := range overruns {
		if o.Span == name || g != nil && g.Match(o.Span) {
			out = append(out, o)
		}
	}
	return out, nil
}

// Superseded returns overruns without the reports of spans still running
// whose end is among them too: the collector reports a span's first sample
// at once, as still running, and the span's end later with all its samples.
// A report and an end are one span when they come from one process and
// started within a millisecond of each other (the start is the record's
// time less its duration).
func Superseded(overruns []snapshot.Overrun) []snapshot.Overrun {
	type end struct {
		pid   uint32
		start time.Time
	}
	var ends []end
	for _, o := range overruns {
		if !o.StillRunning {
			ends = append(ends, end{o.PID, o.Time.Add(-time.Duration(o.DurationNs))})
		}
	}
	if len(ends) == len(overruns) {
		return overruns
	}
	out := make([]snapshot.Overrun, 0, len(overruns))
next:
	for _, o := range overruns {
		if o.StillRunning {
			start := o.Time.Add(-time.Duration(o.DurationNs))
			for _, e := range ends {
				if e.pid == o.PID && e.start.Sub(start).Abs() <= time.Millisecond {
					continue next
				}
			}
		}
		out = append(out, o)
	}
	return out
}

// A Kind says what a Stack is.
type Kind string

const (
	// KindEnd is an overrun's own stack: where the span ended, or where
	// it stood when it was reported still running.
	KindEnd Kind = "end"
	// KindOnCPU and KindOffCPU are the span's in-span samples: taken
	// while it ran past its budget, on the CPU, or off it (blocked, or a
	// parked goroutine).
	KindOnCPU  Kind = "on_cpu"
	KindOffCPU Kind = "off_cpu"
)

// A Stack is one distinct stack of one kind of one span in one command,
// with the overruns or samples that had it.
type Stack struct {
	Span string `json:"span"`
	Comm string `json:"comm,omitempty"`
	Kind Kind   `json:"kind"`
	// Count is the number of overruns (KindEnd) or samples with this
	// stack.
	Count uint64 `json:"count"`
	// TotalNs is, for KindEnd, the overruns' summed duration; for
	// samples, the span time they stand for.
	TotalNs uint64 `json:"total_ns"`
	// MaxNs is the longest of the overruns (KindEnd).
	MaxNs uint64 `json:"max_ns,omitempty"`
	// UnsampledNs is, for KindEnd, the part of TotalNs that no in-span
	// sample covers: the time before the span was over its budget and
	// sampled, or all of it when it was not. Profiles and flame graphs
	// weigh the stack by it, so that a span's samples and end stacks add
	// up to its duration.
	UnsampledNs uint64 `json:"unsampled_ns,omitempty"`
	// StillRunning counts the overruns captured while the span was still
	// running.
	StillRunning uint64 `json:"still_running,omitempty"`
	// TraceIDs are up to MaxTraceIDs example traces, to look up in a
	// tracing backend.
	TraceIDs    []string         `json:"trace_ids,omitempty"`
	UserStack   []snapshot.Frame `json:"user_stack,omitempty"`
	KernelStack []snapshot.Frame `json:"kernel_stack,omitempty"`
	// Trimmed is the number of frames of the span SDKs and of the
	// OpenTelemetry SDK left out of the top of UserStack (see TrimOwn);
	// the snapshot keeps them.
	Trimmed    int    `json:"trimmed,omitempty"`
	StackError string `json:"stack_error,omitempty"`
}

// Weight returns what v counts of s: for ValueDuration, the span time it
// stands for (UnsampledNs for KindEnd, TotalNs for samples); for
// ValueCount, its overruns (KindEnd only); for ValueSamples, its samples.
func (s *Stack) Weight(v Value) uint64 {
	switch {
	case v == ValueDuration && s.Kind == KindEnd:
		return s.UnsampledNs
	case v == ValueDuration:
		return s.TotalNs
	case v == ValueCount && s.Kind == KindEnd, v == ValueSamples && s.Kind != KindEnd:
		return s.Count
	}
	return 0
}

// MaxTraceIDs bounds Stack.TraceIDs.
const MaxTraceIDs = 5

// Aggregate groups overruns and their in-span samples by span, command,
// kind and stack, with user stacks trimmed of the span SDKs' own frames
// (TrimOwn). Spans come in order of their summed duration, largest first,
// and each span's stacks by the time they stand for. Frames are compared
// by where they point (module and offset, or address) and what they name,
// so the same code in two processes of one binary, loaded at different
// addresses, is one stack.
//
// Reports of spans still running whose end is in overruns too are left
// out (see Superseded).
func Aggregate(overruns []snapshot.Overrun) []Stack {
	overruns = Superseded(overruns)
	index := map[string]int{}
	var out []Stack
	var key strings.Builder
	spanTotal := map[string]uint64{}
	add := func(span, comm, source string, kind Kind, running bool, user, kernel []snapshot.Frame, stackErr string) *Stack {
		trimmed, n := TrimOwn(user)
		if kind == KindEnd {
			trimmed, n = TrimEnd(source, user)
		}
		key.Reset()
		key.WriteString(span)
		key.WriteByte(0)
		key.WriteString(comm)
		key.WriteByte(0)
		key.WriteString(string(kind))
		if running {
			key.WriteByte('r')
		}
		for _, fs := range [][]snapshot.Frame{kernel, trimmed} {
			key.WriteByte(0)
			for _, f := range fs {
				writeFrameKey(&key, f)
			}
		}
		i, ok := index[key.String()]
		if !ok {
			i = len(out)
			index[key.String()] = i
			out = append(out, Stack{Span: span, Comm: comm, Kind: kind, UserStack: trimmed, KernelStack: kernel, Trimmed: n, StackError: stackErr})
		}
		return &out[i]
	}
	for _, o := range overruns {
		spanTotal[o.Span] += o.DurationNs
		sampled := uint64(0)
		for _, smp := range o.Samples {
			kind := KindOnCPU
			if smp.OffCPU {
				kind = KindOffCPU
			}
			s := add(o.Span, o.Comm, o.Source, kind, false, smp.UserStack, smp.KernelStack, "")
			s.Count += smp.Count
			s.TotalNs += smp.WeightNs
			sampled += smp.WeightNs
		}
		s := add(o.Span, o.Comm, o.Source, KindEnd, o.StillRunning, o.UserStack, o.KernelStack, o.StackError)
		s.Count++
		s.TotalNs += o.DurationNs
		s.MaxNs = max(s.MaxNs, o.DurationNs)
		if o.DurationNs > sampled {
			s.UnsampledNs += o.DurationNs - sampled
		}
		if o.StillRunning {
			s.StillRunning++
		}
		if o.TraceID != "" && len(s.TraceIDs) < MaxTraceIDs {
			s.TraceIDs = append(s.TraceIDs, o.TraceID)
		}
	}
	sort.SliceStable(out, func(i, j int) bool {
		a, b := &out[i], &out[j]
		if a.Span != b.Span {
			if ta, tb := spanTotal[a.Span], spanTotal[b.Span]; ta != tb {
				return ta > tb
			}
			return a.Span < b.Span
		}
		if wa, wb := a.Weight(ValueDuration), b.Weight(ValueDuration); wa != wb {
			return wa > wb
		}
		return a.Count > b.Count
	})
	return out
}

func writeFrameKey(b *strings.Builder, f snapshot.Frame) {
	if f.Module != "" {
		b.WriteString(f.Module)
		b.WriteByte('+')
		b.WriteString(strconv.FormatUint(f.Offset, 16))
	} else {
		b.WriteString(strconv.FormatUint(f.Addr, 16))
	}
	b.WriteByte(' ')
	b.WriteString(f.Function)
	b.WriteByte(1)
}

// A Value selects what a folded line, a flame graph or a text report
// weighs stacks by.
type Value string

const (
	// ValueDuration weighs by span time in nanoseconds: samples by the
	// time they stand for, and the overruns' time that no sample covers
	// as the span's FrameNotSampled (never as the end stack's frames,
	// which did not necessarily run then). A span's stacks add up to its
	// overruns' durations.
	ValueDuration Value = "duration"
	// ValueCount counts overruns, at their end stacks.
	ValueCount Value = "count"
	// ValueSamples counts in-span samples.
	ValueSamples Value = "samples"
)

// ParseValue checks a value name.
func ParseValue(s string) (Value, error) {
	switch v := Value(s); v {
	case ValueDuration, ValueCount, ValueSamples:
		return v, nil
	}
	return "", fmt.Errorf("value %q: want %q, %q or %q", s, ValueDuration, ValueCount, ValueSamples)
}

// Pseudo-frames of folded stacks, flame graphs and profiles.
const (
	// FrameAtEnd roots a span's end stacks, apart from its samples.
	FrameAtEnd = "[stack at span end]"
	// FrameRunning roots the stacks of spans reported still running.
	FrameRunning = "[still running]"
	// FrameOffCPU tops an off-CPU sample's stack.
	FrameOffCPU = "[off-cpu]"
	// FrameNoStack stands for an empty stack.
	FrameNoStack = "[no stack]"
	// FrameNotSampled stands, in the duration view, for the part of
	// the spans' time no in-span sample covers: no frame is to blame for
	// it, so it is never drawn on the stack where the span ended.
	FrameNotSampled = "[not sampled]"
)

// notSampled says whether s stands, weighed by v, for time no sample
// covers: an end stack in the duration view, drawn as the span's
// FrameNotSampled and not as its frames.
func (s *Stack) notSampled(v Value) bool { return v == ValueDuration && s.Kind == KindEnd }

// marker is the pseudo-frame an end stack sits under.
func (s *Stack) marker() string {
	if s.StillRunning == s.Count {
		return FrameRunning
	}
	return FrameAtEnd
}

// path returns a stack's frames from the outermost to the innermost as
// flame graphs draw them: the span name, FrameAtEnd for an end stack, the
// user frames, the kernel frames (marked by kernelSuffix, and
// FrameOffCPU for an off-CPU sample.
func (s *Stack) path(name func(snapshot.Frame) string, kernelSuffix string) []string {
	p := make([]string, 0, len(s.UserStack)+len(s.KernelStack)+3)
	p = append(p, s.Span)
	if s.Kind == KindEnd {
		p = append(p, s.marker())
	}
	for i := len(s.UserStack) - 1; i >= 0; i-- {
		p = append(p, name(s.UserStack[i]))
	}
	for i := len(s.KernelStack) - 1; i >= 0; i-- {
		p = append(p, name(s.KernelStack[i])+kernelSuffix)
	}
	if len(s.UserStack)+len(s.KernelStack) == 0 {
		p = append(p, FrameNoStack)
	}
	if s.Kind == KindOffCPU {
		p = append(p, FrameOffCPU)
	}
	return p
}

// WriteFolded writes stacks in the folded format flamegraph.pl, speedscope
// and inferno read: one line per stack, frames from the outermost to the
// innermost separated by ';', a space, the value. The outermost frame is
// the span's name; end stacks sit under FrameAtEnd, off-CPU samples end in
// FrameOffCPU, and kernel frames come after user frames, marked with a
// "_[k]" suffix as perf's stackcollapse does. Stacks whose value is 0 are
// left out.
func WriteFolded(w io.Writer, stacks []Stack, v Value) error {
	if _, err := ParseValue(string(v)); err != nil {
		return fmt.Errorf("folded: %w", err)
	}
	// Identical folded lines (stacks that differ only in the comm, or in
	// frames whose names render alike) are merged, as the tools expect.
	sums := map[string]uint64{}
	var order []string
	for _, s := range stacks {
		n := s.Weight(v)
		if n == 0 {
			continue
		}
		var p []string
		if s.notSampled(v) {
			p = []string{s.Span, FrameNotSampled}
		} else {
			p = s.path(func(f snapshot.Frame) string { return foldedEscaper.Replace(frameName(f)) }, "_[k]")
		}
		p[0] = foldedEscaper.Replace(p[0])
		line := strings.Join(p, ";")
		if _, ok := sums[line]; !ok {
			order = append(order, line)
		}
		sums[line] += n
	}
	for _, line := range order {
		if _, err := fmt.Fprintf(w, "%s %d\n", line, sums[line]); err != nil {
			return fmt.Errorf("write folded stacks: %w", err)
		}
	}
	return nil
}

var foldedEscaper = strings.NewReplacer(";", ":", "\n", " ", "\r", " ")

// A SpanSummary is what a span's overruns say together: how many, how
// long, how much of it the in-span samples cover, and the hottest frames.
type SpanSummary struct {
	Span         string `json:"span"`
	Overruns     uint64 `json:"overruns"`
	StillRunning uint64 `json:"still_running,omitempty"`
	DurationNs   uint64 `json:"duration_ns"`
	MaxNs        uint64 `json:"max_ns"`
	// Samples and SampledNs count the in-span samples and the time they
	// stand for; OffCPUNs is the part of it off the CPU.
	Samples   uint64     `json:"samples,omitempty"`
	SampledNs uint64     `json:"sampled_ns,omitempty"`
	OffCPUNs  uint64     `json:"off_cpu_ns,omitempty"`
	Hottest   []HotFrame `json:"hottest,omitempty"`
}

// MaxHottest is the number of hot frames a SpanSummary keeps.
const MaxHottest = 5

// Summarize returns a summary per span, in the order of Aggregate, also
// without superseded reports.
func Summarize(overruns []snapshot.Overrun) []SpanSummary {
	overruns = Superseded(overruns)
	index := map[string]int{}
	var out []SpanSummary
	samples := map[string][]snapshot.Sample{}
	for _, o := range overruns {
		i, ok := index[o.Span]
		if !ok {
			i = len(out)
			index[o.Span] = i
			out = append(out, SpanSummary{Span: o.Span})
		}
		s := &out[i]
		s.Overruns++
		if o.StillRunning {
			s.StillRunning++
		}
		s.DurationNs += o.DurationNs
		s.MaxNs = max(s.MaxNs, o.DurationNs)
		for _, smp := range o.Samples {
			s.Samples += smp.Count
			s.SampledNs += smp.WeightNs
			if smp.OffCPU {
				s.OffCPUNs += smp.WeightNs
			}
		}
		samples[o.Span] = append(samples[o.Span], o.Samples...)
	}
	for i := range out {
		out[i].Hottest = Hottest(samples[out[i].Span], MaxHottest)
	}
	sort.SliceStable(out, func(i, j int) bool {
		if out[i].DurationNs != out[j].DurationNs {
			return out[i].DurationNs > out[j].DurationNs
		}
		return out[i].Span < out[j].Span
	})
	return out
}

// A Report is the JSON form of aggregated stacks.
type Report struct {
	// Span is the span name or glob selected, "" for all.
	Span     string        `json:"span,omitempty"`
	Overruns int           `json:"overruns"`
	Spans    []SpanSummary `json:"spans"`
	Stacks   []Stack       `json:"stacks"`
}

// WriteJSON writes the stacks as an indented Report.
func WriteJSON(w io.Writer, span string, overruns []snapshot.Overrun, stacks []Stack) error {
	if stacks == nil {
		stacks = []Stack{}
	}
	spans := Summarize(overruns)
	if spans == nil {
		spans = []SpanSummary{}
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	if err := enc.Encode(Report{Span: span, Overruns: len(overruns), Spans: spans, Stacks: stacks}); err != nil {
		return fmt.Errorf("write json stacks: %w", err)
	}
	return nil
}

// WriteText writes a report for a terminal: per span a line with its
// overruns, their durations and how much of it the in-span samples cover,
// its hottest frames, then each stack under a line saying what it is (on-
// or off-CPU samples, or the stack at the span's end) with its innermost
// frames (up to depth; all when depth is 0), kernel frames first.
func WriteText(w io.Writer, overruns []snapshot.Overrun, stacks []Stack, depth int) error {
	tw := &textWriter{w: w}
	for i, sum := range Summarize(overruns) {
		if i > 0 {
			tw.printf("\n")
		}
		tw.printf("%s: %s, %v total, %v max", sum.Span, plural(sum.Overruns, "overrun"), dur(sum.DurationNs), dur(sum.MaxNs))
		if sum.StillRunning > 0 {
			tw.printf(", %d still running", sum.StillRunning)
		}
		tw.printf("\n")
		if sum.Samples > 0 {
			verb := "cover"
			if sum.Samples == 1 {
				verb = "covers"
			}
			tw.printf("  %s in the span %s %v", plural(sum.Samples, "sample"), verb, dur(sum.SampledNs))
			if sum.DurationNs > 0 {
				tw.printf(" (%d%%)", (sum.SampledNs*100+sum.DurationNs/2)/sum.DurationNs)
			}
			if sum.OffCPUNs > 0 {
				tw.printf(", %v of it off the CPU", dur(sum.OffCPUNs))
			}
			tw.printf("; hottest:\n")
			for line := range strings.SplitSeq(FormatHottest(sum.Hottest, sum.DurationNs), "\n") {
				tw.printf("    %s\n", line)
			}
		}
		for _, s := range stacks {
			if s.Span != sum.Span {
				continue
			}
			tw.stack(&s, depth)
		}
	}
	return tw.err
}

type textWriter struct {
	w   io.Writer
	err error
}

func (t *textWriter) printf(format string, args ...any) {
	if t.err == nil {
		_, t.err = fmt.Fprintf(t.w, format, args...)
		if t.err != nil {
			t.err = fmt.Errorf("write stacks: %w", t.err)
		}
	}
}

func (t *textWriter) stack(s *Stack, depth int) {
	switch s.Kind {
	case KindEnd:
		t.printf("  at the end: %s", plural(s.Count, "overrun"))
		if s.StillRunning > 0 {
			t.printf(" (%d still running)", s.StillRunning)
		}
		t.printf(", %v total, %v max", dur(s.TotalNs), dur(s.MaxNs))
		if s.UnsampledNs != s.TotalNs {
			t.printf(", %v not sampled", dur(s.UnsampledNs))
		}
	case KindOnCPU:
		t.printf("  on the CPU: %s, %v", plural(s.Count, "sample"), dur(s.TotalNs))
	case KindOffCPU:
		t.printf("  off the CPU: %s, %v", plural(s.Count, "sample"), dur(s.TotalNs))
	}
	if s.Comm != "" {
		t.printf(" (%s)", s.Comm)
	}
	t.printf("\n")
	if s.StackError != "" {
		t.printf("    ! %s\n", s.StackError)
	}
	frames := append(append([]snapshot.Frame(nil), s.KernelStack...), s.UserStack...)
	n := len(frames)
	if depth > 0 {
		n = depth
	}
	text := snapshot.TopFrames(frames, n)
	if text == "" {
		text = FrameNoStack
	}
	for line := range strings.SplitSeq(text, "\n") {
		t.printf("      %s\n", line)
	}
}

func plural(n uint64, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return strconv.FormatUint(n, 10) + " " + noun + "s"
}

// dur rounds a duration for reading: to the microsecond below 10ms, to the
// millisecond above.
func dur(ns uint64) time.Duration {
	d := time.Duration(ns)
	if d >= 10*time.Millisecond {
		return d.Round(time.Millisecond)
	}
	return d.Round(time.Microsecond)
}
