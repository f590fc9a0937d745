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

// Select returns the overruns whose span matches pattern, an exact name or
// a glob in the rule files' syntax (internal/glob: "checkout*",
// "GET /api/*", "!health"). An empty pattern matches all.
func Select(overruns []snapshot.Overrun, pattern string) ([]snapshot.Overrun, error) {
	if pattern == "" {
		return overruns, nil
	}
	g, err := glob.Compile(pattern)
	if err != nil {
		return nil, fmt.Errorf("span pattern: %w", err)
	}
	var out []snapshot.Overrun
	for _, o := range overruns {
		if g.Match(o.Span) {
			out = append(out, o)
		}
	}
	return out, nil
}

// A Stack is one distinct stack of one span in one command, with the
// overruns that had it.
type Stack struct {
	Span string `json:"span"`
	Comm string `json:"comm,omitempty"`
	// Count is the number of overruns with this stack; TotalNs and MaxNs
	// sum and bound their durations.
	Count   uint64 `json:"count"`
	TotalNs uint64 `json:"total_ns"`
	MaxNs   uint64 `json:"max_ns"`
	// StillRunning counts the overruns captured while the span was still
	// running.
	StillRunning uint64 `json:"still_running,omitempty"`
	// TraceIDs are up to MaxTraceIDs example traces, to look up in a
	// tracing backend.
	TraceIDs    []string         `json:"trace_ids,omitempty"`
	UserStack   []snapshot.Frame `json:"user_stack,omitempty"`
	KernelStack []snapshot.Frame `json:"kernel_stack,omitempty"`
	StackError  string           `json:"stack_error,omitempty"`
}

// MaxTraceIDs bounds Stack.TraceIDs.
const MaxTraceIDs = 5

// Aggregate groups overruns by span, command and stack, largest total
// duration first. Frames are compared by where they point (module and
// offset, or address) and what they name, so the same code in two
// processes of one binary, loaded at different addresses, is one stack.
func Aggregate(overruns []snapshot.Overrun) []Stack {
	index := map[string]int{}
	var out []Stack
	var key strings.Builder
	for _, o := range overruns {
		key.Reset()
		key.WriteString(o.Span)
		key.WriteByte(0)
		key.WriteString(o.Comm)
		for _, fs := range [][]snapshot.Frame{o.KernelStack, o.UserStack} {
			key.WriteByte(0)
			for _, f := range fs {
				writeFrameKey(&key, f)
			}
		}
		i, ok := index[key.String()]
		if !ok {
			i = len(out)
			index[key.String()] = i
			out = append(out, Stack{Span: o.Span, Comm: o.Comm, UserStack: o.UserStack, KernelStack: o.KernelStack, StackError: o.StackError})
		}
		s := &out[i]
		s.Count++
		s.TotalNs += o.DurationNs
		s.MaxNs = max(s.MaxNs, o.DurationNs)
		if o.StillRunning {
			s.StillRunning++
		}
		if o.TraceID != "" && len(s.TraceIDs) < MaxTraceIDs {
			s.TraceIDs = append(s.TraceIDs, o.TraceID)
		}
	}
	sort.SliceStable(out, func(i, j int) bool {
		if out[i].TotalNs != out[j].TotalNs {
			return out[i].TotalNs > out[j].TotalNs
		}
		return out[i].Count > out[j].Count
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

// A Value selects what a folded line counts.
type Value string

const (
	// ValueCount counts overruns.
	ValueCount Value = "count"
	// ValueDuration sums overrun durations in nanoseconds.
	ValueDuration Value = "duration"
)

// WriteFolded writes stacks in the folded format flamegraph.pl, speedscope
// and inferno read: one line per stack, frames from the outermost (the
// thread's entry) to the innermost separated by ';', a space, the value.
// Kernel frames come after user frames, marked with a "_[k]" suffix as
// perf's stackcollapse does.
func WriteFolded(w io.Writer, stacks []Stack, v Value) error {
	if v != ValueCount && v != ValueDuration {
		return fmt.Errorf("folded value %q: want %q or %q", v, ValueCount, ValueDuration)
	}
	// Identical folded lines (stacks that differ only in the comm, or in
	// frames whose names render alike) are merged, as the tools expect.
	sums := map[string]uint64{}
	var order []string
	var b strings.Builder
	for _, s := range stacks {
		b.Reset()
		n := 0
		for i := len(s.UserStack) - 1; i >= 0; i-- {
			if n > 0 {
				b.WriteByte(';')
			}
			b.WriteString(foldedName(s.UserStack[i], ""))
			n++
		}
		for i := len(s.KernelStack) - 1; i >= 0; i-- {
			if n > 0 {
				b.WriteByte(';')
			}
			b.WriteString(foldedName(s.KernelStack[i], "_[k]"))
			n++
		}
		if n == 0 {
			b.WriteString("[no stack]")
		}
		line := b.String()
		if _, ok := sums[line]; !ok {
			order = append(order, line)
		}
		if v == ValueCount {
			sums[line] += s.Count
		} else {
			sums[line] += s.TotalNs
		}
	}
	for _, line := range order {
		if _, err := fmt.Fprintf(w, "%s %d\n", line, sums[line]); err != nil {
			return fmt.Errorf("write folded stacks: %w", err)
		}
	}
	return nil
}

var foldedEscaper = strings.NewReplacer(";", ":", "\n", " ", "\r", " ")

func foldedName(f snapshot.Frame, suffix string) string {
	name := f.Function
	if name == "" {
		name = f.String()
	}
	return foldedEscaper.Replace(name) + suffix
}

// A Report is the JSON form of aggregated stacks.
type Report struct {
	// Span is the span name or pattern selected, "" for all.
	Span     string  `json:"span,omitempty"`
	Overruns int     `json:"overruns"`
	Stacks   []Stack `json:"stacks"`
}

// WriteJSON writes the stacks as an indented Report.
func WriteJSON(w io.Writer, span string, overruns int, stacks []Stack) error {
	if stacks == nil {
		stacks = []Stack{}
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	if err := enc.Encode(Report{Span: span, Overruns: overruns, Stacks: stacks}); err != nil {
		return fmt.Errorf("write json stacks: %w", err)
	}
	return nil
}

// WriteText writes the stacks for a terminal: per stack a header with the
// span, command, count and durations, then its innermost frames (up to
// depth; all when depth is 0), kernel frames first.
func WriteText(w io.Writer, stacks []Stack, depth int) error {
	for i, s := range stacks {
		if i > 0 {
			fmt.Fprintln(w)
		}
		fmt.Fprintf(w, "%s", s.Span)
		if s.Comm != "" {
			fmt.Fprintf(w, " (%s)", s.Comm)
		}
		noun := "overruns"
		if s.Count == 1 {
			noun = "overrun"
		}
		fmt.Fprintf(w, ": %d %s, %v total, %v max", s.Count, noun, time.Duration(s.TotalNs), time.Duration(s.MaxNs))
		if s.StillRunning > 0 {
			fmt.Fprintf(w, ", %d still running", s.StillRunning)
		}
		fmt.Fprintln(w)
		if s.StackError != "" {
			fmt.Fprintf(w, "  ! %s\n", s.StackError)
		}
		frames := append(append([]snapshot.Frame(nil), s.KernelStack...), s.UserStack...)
		n := len(frames)
		if depth > 0 {
			n = depth
		}
		if text := snapshot.TopFrames(frames, n); text != "" {
			for line := range strings.SplitSeq(text, "\n") {
				if _, err := fmt.Fprintf(w, "    %s\n", line); err != nil {
					return fmt.Errorf("write stacks: %w", err)
				}
			}
		} else if _, err := fmt.Fprintln(w, "    [no stack]"); err != nil {
			return fmt.Errorf("write stacks: %w", err)
		}
	}
	return nil
}
