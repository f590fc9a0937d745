package usdt

import (
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/spanwatch/spanwatch/config/section"
	"github.com/spanwatch/spanwatch/internal/duration"
	"github.com/spanwatch/spanwatch/internal/srcspec"
	"github.com/spanwatch/spanwatch/snapshot"
)

// A ProbeRef names a USDT probe.
type ProbeRef struct {
	Provider string
	Name     string
}

func (r ProbeRef) String() string { return r.Provider + ":" + r.Name }

// A SpanSource makes spans, or an argument metric, from USDT probes:
// either a Start/End pair, timed in the kernel from one to the other, or
// one Probe whose DurationArg holds the duration in nanoseconds (without
// DurationArg, each hit is a span of duration 0: counted, not timed), or,
// with Metric, one Probe whose ValueArg is a value.
type SpanSource struct {
	// Binary is the executable or shared library holding the probes; all
	// processes that run it are traced. With PID, only that process is,
	// and Binary is a path in its mount namespace.
	Binary string
	// PID traces one process. Without Binary its executable and every
	// library it has mapped are searched for the probes.
	PID int
	// Span is the span name; or NameArg (0-based) is an argument holding a
	// pointer to a NUL-terminated name (read at the start probe of a pair).
	Span    string
	NameArg int // -1: none
	// NameArgs names spans by string arguments instead, read as NameArg
	// is and joined by NameSeparator: name_arg: {ptr: P, len: L} (one
	// string given as pointer and length, as the JVM's probes pass
	// names) or name_args: [...] (a name built from two or more, such as
	// a class and a method). NameArg is then -1.
	NameArgs      []StrArg
	NameSeparator string
	// Prefix is prepended to every span name the source makes (span:,
	// or the name read from arguments): its spans cannot collide with
	// another source's spans of the same name in the same cgroup.
	Prefix string
	// Metric makes the source an argument metric of this name: each hit
	// of Probe adds ValueArg's value to the series (count, signed sum,
	// min, max, histogram).
	Metric string
	Start  ProbeRef
	End    ProbeRef
	Probe  ProbeRef
	// KeyArg pairs start and end by an argument (a request id) present in
	// both, instead of by thread. -1: by thread.
	KeyArg int
	// StatusArg is an argument (of the end probe, or the single probe)
	// whose nonzero value marks the span as an error: the shorthand for
	// Error "argN != 0". -1: none.
	StatusArg int
	// Error marks a span (or value) as an error when it holds over the
	// arguments of the end probe or the single probe. Nil: none (or
	// StatusArg).
	Error *srcspec.Predicate
	// Labels add label values from arguments of the end probe or the
	// single probe to the series key; a pair's labels may also name
	// arguments of its start probe (start.argN), kept with the open
	// span until its end.
	Labels srcspec.Labels
	// StartArgs are the start probe's arguments the labels read: label
	// operand StartOperand + i is StartArgs[i].
	StartArgs []int
	// DurationArg is the single probe's argument holding the duration.
	DurationArg int // -1: none
	// ValueArg is a metric's value argument.
	ValueArg int // -1: none
	// SilentAfter is how long the source may stay attached without a
	// probe hit before it is reported silent, once: a runtime whose
	// probes need a switch to fire (docs/sources.md, "Silent sources").
	// 0: never. The configuration's default is DefaultSilentAfter.
	SilentAfter time.Duration
	// Pos is where the source is declared.
	Pos section.Pos
}

// A StrArg is a string argument: a pointer to a NUL-terminated string
// (Len -1), or a pointer and a length in bytes (the string need not end
// in a NUL, and a NUL in it ends the name).
type StrArg struct {
	Ptr int
	Len int // the argument holding the length; -1: NUL-terminated
}

func (a StrArg) String() string {
	if a.Len < 0 {
		return "arg" + strconv.Itoa(a.Ptr)
	}
	return fmt.Sprintf("arg%d[:arg%d]", a.Ptr, a.Len)
}

// DefaultNameSeparator joins the strings of name_args: when
// name_separator: does not say otherwise.
const DefaultNameSeparator = "."

// Named reports whether the source's spans are named by arguments.
func (s *SpanSource) Named() bool { return s.NameArg >= 0 || len(s.NameArgs) > 0 }

// NameParts returns the string arguments that name the source's spans, in
// order (none for a fixed name).
func (s *SpanSource) NameParts() []StrArg {
	if s.NameArg >= 0 {
		return []StrArg{{Ptr: s.NameArg, Len: -1}}
	}
	return s.NameArgs
}

// NameDesc describes how the source's spans are named by arguments, as
// "arg1[:arg2].arg3[:arg4]" (a pointer and the length after the colon,
// the separator between), after the prefix; "" for a fixed name.
func (s *SpanSource) NameDesc() string {
	parts := s.NameParts()
	if len(parts) == 0 {
		return ""
	}
	var b strings.Builder
	b.WriteString(s.Prefix)
	for i, p := range parts {
		if i > 0 {
			b.WriteString(s.NameSeparator)
		}
		b.WriteString(p.String())
	}
	return b.String()
}

// SpanName returns the span name of a source with a fixed name, with its
// prefix.
func (s *SpanSource) SpanName() string {
	if s.Span == "" {
		return ""
	}
	return s.Prefix + s.Span
}

// DefaultSilentAfter is silent_after when a source does not give it.
const DefaultSilentAfter = 10 * time.Minute

// Paired reports whether the source is a start/end pair.
func (s *SpanSource) Paired() bool { return s.Probe.Name == "" && s.Start.Name != "" }

// IsMetric reports whether the source makes an argument metric.
func (s *SpanSource) IsMetric() bool { return s.Metric != "" }

// Predicate returns the error predicate in effect: Error, or StatusArg's
// "argN != 0", or nil.
func (s *SpanSource) Predicate() *srcspec.Predicate {
	if s.Error != nil {
		return s.Error
	}
	if s.StatusArg >= 0 {
		return srcspec.Nonzero("arg"+strconv.Itoa(s.StatusArg), s.StatusArg)
	}
	return nil
}

// Describe names the source for logs and errors.
func (s *SpanSource) Describe() string {
	where := s.Binary
	if s.PID != 0 {
		where = fmt.Sprintf("pid %d", s.PID)
		if s.Binary != "" {
			where += " " + s.Binary
		}
	}
	name := s.SpanName()
	if name == "" {
		name = "named by " + s.NameDesc()
	}
	switch {
	case s.IsMetric():
		return fmt.Sprintf("usdt metric %s (%s in %s)", s.Metric, s.Probe, where)
	case s.Paired():
		return fmt.Sprintf("usdt span %s (%s..%s in %s)", name, s.Start, s.End, where)
	}
	return fmt.Sprintf("usdt span %s (%s in %s)", name, s.Probe, where)
}

// maxSpanName is the longest span name: SPAN_NAME_LEN bytes with room for
// the terminating NUL.
const maxSpanName = snapshot.NameLen - 1

// StartOperand is the operand of a pair's first start value
// (USDT_START_OPERAND in bpf/usdt.bpf.c); MaxStartArgs how many start
// arguments a source keeps (TASK_SPAN_VALS_MAX in bpf/task_spans.h).
const (
	StartOperand = MaxArgs
	MaxStartArgs = 3
)

// labelResolver resolves a source's label operands: arg0 to arg11 (the
// end probe's, or the single probe's) and start.arg0 to start.arg11 (the
// start probe's of a pair), numbering the start arguments as it meets
// them in s.StartArgs.
func labelResolver(s *SpanSource) srcspec.Resolver {
	return func(name string) (int, error) {
		n, ok := strings.CutPrefix(name, "start.")
		if !ok {
			i, err := ArgResolver(name)
			if err != nil {
				return 0, fmt.Errorf("unknown operand %s: want arg0 to arg%d (the probe's arguments) or start.arg0 to start.arg%d (a pair's start probe's)", name, MaxArgs-1, MaxArgs-1)
			}
			return i, nil
		}
		i, err := ArgResolver(n)
		if err != nil {
			return 0, fmt.Errorf("unknown operand %s: want start.arg0 to start.arg%d (the start probe's arguments)", name, MaxArgs-1)
		}
		for j, a := range s.StartArgs {
			if a == i {
				return StartOperand + j, nil
			}
		}
		if len(s.StartArgs) == MaxStartArgs {
			return 0, fmt.Errorf("%s: a source keeps at most %d start arguments", name, MaxStartArgs)
		}
		s.StartArgs = append(s.StartArgs, i)
		return StartOperand + len(s.StartArgs) - 1, nil
	}
}

// ArgResolver resolves the operands a USDT source's predicates and labels
// name: arg0 to arg11, each the probe argument of that index.
func ArgResolver(name string) (int, error) {
	if n, ok := strings.CutPrefix(name, "arg"); ok {
		if i, err := strconv.Atoi(n); err == nil && i >= 0 && i < MaxArgs && strconv.Itoa(i) == n {
			return i, nil
		}
	}
	return 0, fmt.Errorf("unknown operand %s: want arg0 to arg%d (the probe's arguments)", name, MaxArgs-1)
}

// DecodeSources decodes the usdt: list of the configuration file's
// sources: section (n is the list), reporting every problem into d at its
// position, and returns nil when there was one; relative binary paths are
// taken from the file's directory. Package config calls it for the
// configuration file.
//
// A source whose binary is present and readable here is also checked
// against the binary's probes: each probe exists (a near miss gets a
// suggestion), and every call site has the arguments the source reads.
// Binaries that are not present (a configuration checked away from the
// host it runs on) and pid: sources are checked when they attach.
func DecodeSources(d *section.Decoder, n *yaml.Node) []SpanSource {
	sd := &srcDecoder{Decoder: d, files: map[string]*File{}}
	n = section.Resolve(n)
	if section.IsNull(n) {
		return nil
	}
	if n.Kind != yaml.SequenceNode {
		sd.errorf(n, "sources.usdt must be a list of span sources")
		return nil
	}
	before := d.Len()
	var out []SpanSource
	for _, item := range n.Content {
		if s, ok := sd.source(item); ok {
			out = append(out, s)
		}
	}
	if d.Len() > before {
		return nil
	}
	return out
}

type srcDecoder struct {
	*section.Decoder
	files map[string]*File // binaries opened for checks, by path
}

func (d *srcDecoder) errorf(n *yaml.Node, format string, a ...any) { d.Errorf(n, format, a...) }

// mapping walks a mapping whose keys must be in keys, rejecting unknown and
// repeated keys (with the nearest known key as a hint).
func (d *srcDecoder) mapping(n *yaml.Node, what string, keys []string, f func(key string, v *yaml.Node)) bool {
	if n.Kind != yaml.MappingNode {
		d.errorf(n, "%s must be a mapping", what)
		return false
	}
	seen := map[string]bool{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k := section.Resolve(n.Content[i])
		if k.Kind != yaml.ScalarNode {
			d.errorf(k, "%s: keys must be strings", what)
			continue
		}
		known := false
		for _, want := range keys {
			if k.Value == want {
				known = true
			}
		}
		if !known {
			hint := ""
			if near := srcspec.Nearest(k.Value, keys); near != "" {
				hint = fmt.Sprintf(": did you mean %s?", near)
			}
			d.errorf(k, "%s: unknown key %q (known: %s)%s", what, k.Value, strings.Join(keys, ", "), hint)
			continue
		}
		if seen[k.Value] {
			d.errorf(k, "%s: %s given twice", what, k.Value)
			continue
		}
		seen[k.Value] = true
		f(k.Value, n.Content[i+1])
	}
	return true
}

func (d *srcDecoder) str(n *yaml.Node, what string) (string, bool) {
	n = section.Resolve(n)
	if n.Kind != yaml.ScalarNode || n.Tag == "!!null" || n.Tag == "!!map" || n.Tag == "!!seq" {
		d.errorf(n, "%s must be a string", what)
		return "", false
	}
	if n.Value == "" {
		d.errorf(n, "%s must not be empty", what)
		return "", false
	}
	return n.Value, true
}

func (d *srcDecoder) intIn(n *yaml.Node, what string, lo, hi int) (int, bool) {
	n = section.Resolve(n)
	if n.Kind != yaml.ScalarNode || n.Tag != "!!int" {
		d.errorf(n, "%s must be an integer", what)
		return 0, false
	}
	v, err := strconv.ParseInt(n.Value, 0, 64)
	if err != nil || v < int64(lo) || v > int64(hi) {
		d.errorf(n, "%s must be between %d and %d, not %s", what, lo, hi, n.Value)
		return 0, false
	}
	return int(v), true
}

// strOrEmpty reads a string that may be empty ("").
func (d *srcDecoder) strOrEmpty(n *yaml.Node, what string) (string, bool) {
	n = section.Resolve(n)
	if n.Kind != yaml.ScalarNode || n.Tag != "!!str" {
		d.errorf(n, "%s must be a string (\"\" for none)", what)
		return "", false
	}
	return n.Value, true
}

// strArg reads a string argument given as {ptr: P, len: L}.
func (d *srcDecoder) strArg(n *yaml.Node, what string) (StrArg, bool) {
	a := StrArg{Ptr: -1, Len: -1}
	ok := true
	before := d.Len()
	if !d.mapping(n, what, []string{"ptr", "len"}, func(key string, v *yaml.Node) {
		i, good := d.intIn(v, what+"."+key, 0, MaxArgs-1)
		ok = ok && good
		if key == "ptr" {
			a.Ptr = i
		} else {
			a.Len = i
		}
	}) || !ok || d.Len() > before {
		return a, false
	}
	switch {
	case a.Ptr < 0:
		d.errorf(n, "%s needs ptr: N, the argument holding the string's address", what)
		return a, false
	case a.Len < 0:
		d.errorf(n, "%s needs len: N, the argument holding the string's length (for a NUL-terminated string give the argument alone: %d)", what, a.Ptr)
		return a, false
	case a.Len == a.Ptr:
		d.errorf(n, "%s: ptr and len are the same argument (%d)", what, a.Ptr)
		return a, false
	}
	return a, true
}

// strArgs reads name_args: a list of string arguments, each N (a
// pointer to a NUL-terminated string) or {ptr: P, len: L}.
func (d *srcDecoder) strArgs(n *yaml.Node) ([]StrArg, bool) {
	n = section.Resolve(n)
	if n.Kind != yaml.SequenceNode || len(n.Content) == 0 {
		d.errorf(n, "name_args must be a list of string arguments: N (a pointer to a NUL-terminated string) or {ptr: P, len: L}")
		return nil, false
	}
	if len(n.Content) > MaxNameArgs {
		d.errorf(n, "name_args has %d strings, more than %d", len(n.Content), MaxNameArgs)
		return nil, false
	}
	var out []StrArg
	ok := true
	for i, e := range n.Content {
		e = section.Resolve(e)
		what := fmt.Sprintf("name_args[%d]", i)
		if e.Kind == yaml.MappingNode {
			a, good := d.strArg(e, what)
			ok = ok && good
			out = append(out, a)
			continue
		}
		p, good := d.intIn(e, what, 0, MaxArgs-1)
		ok = ok && good
		out = append(out, StrArg{Ptr: p, Len: -1})
	}
	return out, ok
}

// MaxNameArgs is how many strings name_args: joins; MaxNameSegs how many
// pieces (strings, and prefix and separators in chunks of nameTextChunk
// bytes) a name is built from (USDT_NAME_SEGS in bpf/usdt.bpf.c).
const (
	MaxNameArgs   = 4
	MaxNameSegs   = 8
	nameTextChunk = 16
)

// nameSegs counts the pieces of a name built from arguments.
func nameSegs(s *SpanSource) int {
	chunks := func(t string) int { return (len(t) + nameTextChunk - 1) / nameTextChunk }
	parts := s.NameParts()
	n := chunks(s.Prefix) + len(parts)
	if len(parts) > 1 {
		n += (len(parts) - 1) * chunks(s.NameSeparator)
	}
	return n
}

// duration reads a duration (internal/duration: 30s, 10m, 1h, 0).
func (d *srcDecoder) duration(n *yaml.Node, what string) (time.Duration, bool) {
	n = section.Resolve(n)
	if n.Kind != yaml.ScalarNode || (n.Tag != "!!str" && n.Tag != "!!int") {
		d.errorf(n, "%s must be a duration (30s, 10m, 1h; 0: never)", what)
		return 0, false
	}
	v, err := duration.Parse(n.Value)
	if err != nil || v < 0 {
		d.errorf(n, "%s: %q is not a duration (30s, 10m, 1h; 0: never)", what, n.Value)
		return 0, false
	}
	return v, true
}

func (d *srcDecoder) probeRef(n *yaml.Node, what string) (ProbeRef, bool) {
	var r ProbeRef
	ok := true
	n = section.Resolve(n)
	if !d.mapping(n, what, []string{"provider", "probe"}, func(key string, v *yaml.Node) {
		s, good := d.str(v, what+"."+key)
		ok = ok && good
		if key == "provider" {
			r.Provider = s
		} else {
			r.Name = s
		}
	}) {
		return r, false
	}
	if ok && (r.Provider == "" || r.Name == "") {
		d.errorf(n, "%s needs both provider and probe", what)
		return r, false
	}
	return r, ok
}

var sourceKeys = []string{
	"binary", "pid", "span", "name_arg", "name_args", "name_separator", "prefix", "metric", "start", "end", "probe",
	"key", "key_arg", "status_arg", "error", "labels", "label_cap", "duration_arg", "value_arg",
	"silent_after",
}

func (d *srcDecoder) source(n *yaml.Node) (SpanSource, bool) {
	n = section.Resolve(n)
	s := SpanSource{NameArg: -1, KeyArg: -1, StatusArg: -1, DurationArg: -1, ValueArg: -1, SilentAfter: DefaultSilentAfter, Pos: section.At(d.File, n)}
	before := d.Len()
	const what = "usdt source"
	has := map[string]*yaml.Node{}
	argMax := MaxArgs - 1
	if !d.mapping(n, what, sourceKeys, func(key string, v *yaml.Node) {
		v = section.Resolve(v)
		has[key] = v
		switch key {
		case "binary":
			if b, ok := d.str(v, "binary"); ok {
				s.Binary = b
			}
		case "pid":
			s.PID, _ = d.intIn(v, "pid", 1, 1<<22)
		case "span":
			if name, ok := d.str(v, "span"); ok {
				s.Span = name
			}
		case "prefix":
			if p, ok := d.str(v, key); ok {
				s.Prefix = p
			}
		case "name_separator":
			s.NameSeparator, _ = d.strOrEmpty(v, key)
		case "name_args":
			s.NameArgs, _ = d.strArgs(v)
		case "metric":
			if name, ok := d.str(v, "metric"); ok {
				if err := srcspec.CheckMetricName(name); err != nil {
					d.errorf(v, "%v", err)
				}
				s.Metric = name
			}
		case "name_arg":
			if v.Kind == yaml.MappingNode {
				if a, ok := d.strArg(v, key); ok {
					s.NameArgs = []StrArg{a}
				}
			} else {
				s.NameArg, _ = d.intIn(v, key, 0, argMax)
			}
		case "key_arg":
			s.KeyArg, _ = d.intIn(v, key, 0, argMax)
		case "status_arg":
			s.StatusArg, _ = d.intIn(v, key, 0, argMax)
		case "duration_arg":
			s.DurationArg, _ = d.intIn(v, key, 0, argMax)
		case "value_arg":
			s.ValueArg, _ = d.intIn(v, key, 0, argMax)
		case "error":
			s.Error = srcspec.DecodePredicate(d.Decoder, v, ArgResolver)
		case "labels":
			s.Labels.List, _ = srcspec.DecodeLabels(d.Decoder, v, labelResolver(&s))
		case "label_cap":
			s.Labels.Cap, _ = srcspec.DecodeLabelCap(d.Decoder, v)
		case "silent_after":
			s.SilentAfter, _ = d.duration(v, key)
		case "key":
			if k, ok := d.str(v, "key"); ok && k != "thread" {
				d.errorf(v, `key must be "thread" (use key_arg: N to pair by an argument)`)
			}
		case "start":
			s.Start, _ = d.probeRef(v, "start")
		case "end":
			s.End, _ = d.probeRef(v, "end")
		case "probe":
			s.Probe, _ = d.probeRef(v, "probe")
		}
	}) {
		return s, false
	}
	if d.Len() > before {
		return s, false
	}
	metric := has["metric"] != nil
	switch {
	case has["binary"] == nil && has["pid"] == nil:
		d.errorf(n, "usdt source needs binary: (every process running it) or pid:")
	case metric && has["span"] != nil:
		d.errorf(has["span"], "give span: (spans) or metric: (values), not both")
	case metric && has["name_arg"] != nil:
		d.errorf(has["name_arg"], "a metric is named by metric:, not name_arg:")
	case metric && has["name_args"] != nil:
		d.errorf(has["name_args"], "a metric is named by metric:, not name_args:")
	case metric && has["prefix"] != nil:
		d.errorf(has["prefix"], "prefix: is for span names; a metric is named by metric: alone")
	case !metric && has["span"] != nil && has["name_arg"] != nil:
		d.errorf(has["name_arg"], "give span: or name_arg:, not both")
	case !metric && has["span"] != nil && has["name_args"] != nil:
		d.errorf(has["name_args"], "give span: or name_args:, not both")
	case has["name_arg"] != nil && has["name_args"] != nil:
		d.errorf(has["name_args"], "give name_arg: (one string) or name_args: (a name built from several), not both")
	case !metric && has["span"] == nil && has["name_arg"] == nil && has["name_args"] == nil:
		d.errorf(n, "usdt source needs span: NAME or name_arg: N (or name_args: [...], a name built from several strings; metric: NAME for values)")
	}
	if has["name_separator"] != nil && has["name_args"] == nil {
		d.errorf(has["name_separator"], "name_separator joins the strings of name_args: give name_args: too")
	}
	if has["name_args"] != nil && has["name_separator"] == nil {
		s.NameSeparator = DefaultNameSeparator
	}
	if has["span"] != nil && len(s.Prefix)+len(s.Span) > maxSpanName {
		at := has["span"]
		if has["prefix"] != nil {
			d.errorf(at, "span name is %d bytes with its prefix (%d), more than %d", len(s.Prefix)+len(s.Span), len(s.Prefix), maxSpanName)
		} else {
			d.errorf(at, "span name is %d bytes, more than %d", len(s.Span), maxSpanName)
		}
	}
	if !metric && s.Named() && (s.Prefix != "" || len(s.NameArgs) > 0) {
		if segs := nameSegs(&s); segs > MaxNameSegs {
			at := has["name_args"]
			if at == nil {
				at = has["prefix"]
			}
			d.errorf(at, "the name needs %d pieces (each string argument, and %d bytes of prefix or separator per piece), more than %d: shorten the prefix or separator, or use fewer arguments",
				segs, nameTextChunk, MaxNameSegs)
		}
	}
	pair := has["start"] != nil || has["end"] != nil
	single := has["probe"] != nil
	switch {
	case metric && pair:
		d.errorf(n, "a metric takes its values at one probe: give probe: and value_arg:, not start: and end:")
	case metric && !single:
		d.errorf(n, "a metric needs probe: and value_arg: N (the argument holding the value)")
	case metric && has["value_arg"] == nil:
		d.errorf(has["metric"], "a metric needs value_arg: N (the argument holding the value)")
	case metric && has["duration_arg"] != nil:
		d.errorf(has["duration_arg"], "a metric's value is value_arg:, not duration_arg:")
	case !metric && has["value_arg"] != nil:
		d.errorf(has["value_arg"], "value_arg is a metric's value: give metric: NAME, or duration_arg: N for a span's duration")
	case pair && single:
		d.errorf(has["probe"], "give start: and end: (a pair) or probe: (one probe), not both")
	case pair && (has["start"] == nil || has["end"] == nil):
		d.errorf(n, "a start/end pair needs both start: and end:")
	case pair && has["duration_arg"] != nil:
		d.errorf(has["duration_arg"], "duration_arg is for a single probe:, a start/end pair is timed in the kernel")
	case single && (has["key"] != nil || has["key_arg"] != nil):
		d.errorf(n, "key and key_arg pair a start with an end: not for a single probe:")
	case !pair && !single:
		d.errorf(n, "usdt source needs start: and end:, or probe: (with duration_arg: N for a duration)")
	}
	if has["key"] != nil && has["key_arg"] != nil {
		d.errorf(has["key_arg"], "give key: thread or key_arg: N, not both")
	}
	if has["error"] != nil && has["status_arg"] != nil {
		d.errorf(has["status_arg"], `give error: (a predicate) or status_arg: N (the same as error: "argN != 0"), not both`)
	}
	if has["label_cap"] != nil && has["labels"] == nil {
		d.errorf(has["label_cap"], "label_cap without labels:")
	}
	if len(s.StartArgs) > 0 && !pair {
		for _, l := range s.Labels.List {
			if l.Operand >= StartOperand {
				d.errorf(labelNode(has["labels"], l.Name), "label %s: %s is an argument of a pair's start probe: this source has one probe (use arg%d)",
					l.Name, l.OperandName, s.StartArgs[l.Operand-StartOperand])
			}
		}
	}
	if d.Len() > before {
		return s, false
	}
	if s.Binary != "" && s.PID == 0 && !filepath.IsAbs(s.Binary) {
		s.Binary = filepath.Join(filepath.Dir(d.File), s.Binary)
	}
	d.checkBinary(&s, has)
	if d.Len() > before {
		return s, false
	}
	return s, true
}

// A role is one probe of a source and the arguments read there.
type role struct {
	name string // "start", "end" or "probe": its key in the source
	ref  ProbeRef
	uses []argUse
}

// An argUse is one argument a source reads at a probe, and where the
// rule file says so.
type argUse struct {
	arg  int
	what string     // "name_arg", "label status", "error"...
	node *yaml.Node // the option's value
	off  int        // byte offset in node's scalar (a predicate's operand), or -1
	ptr  bool       // a pointer to a string: 8 bytes on 64-bit targets
}

// roles returns the probes of s and the arguments it reads at each, with
// the option nodes that ask for them.
func (s *SpanSource) roles(has map[string]*yaml.Node) []role {
	use := func(arg int, what string, ptr bool) []argUse {
		if arg < 0 {
			return nil
		}
		return []argUse{{arg: arg, what: what, node: has[what], off: -1, ptr: ptr}}
	}
	var last []argUse // read at the end or single probe
	if s.Error != nil {
		for _, r := range s.Error.Refs() {
			last = append(last, argUse{arg: r.Operand, what: "error", node: has["error"], off: r.Offset})
		}
	}
	last = append(last, use(s.StatusArg, "status_arg", false)...)
	var first []argUse // start values
	for _, l := range s.Labels.List {
		u := argUse{arg: l.Operand, what: "label " + l.Name, node: labelNode(has["labels"], l.Name), off: -1}
		if l.Operand >= StartOperand {
			u.arg = s.StartArgs[l.Operand-StartOperand]
			first = append(first, u)
			continue
		}
		last = append(last, u)
	}
	var name []argUse
	for _, p := range s.NameParts() {
		what := "name_arg"
		if has["name_args"] != nil {
			what = "name_args"
		}
		name = append(name, use(p.Ptr, what, true)...)
		name = append(name, use(p.Len, what, false)...)
	}
	if s.Paired() {
		start := append(append(use(s.KeyArg, "key_arg", false), name...), first...)
		end := append(use(s.KeyArg, "key_arg", false), last...)
		return []role{{"start", s.Start, start}, {"end", s.End, end}}
	}
	one := append(name, last...)
	one = append(one, use(s.DurationArg, "duration_arg", false)...)
	one = append(one, use(s.ValueArg, "value_arg", false)...)
	return []role{{"probe", s.Probe, one}}
}

// labelNode returns the value node of label name in a labels: mapping.
func labelNode(n *yaml.Node, name string) *yaml.Node {
	if n == nil || n.Kind != yaml.MappingNode {
		return n
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		if n.Content[i].Value == name {
			return n.Content[i+1]
		}
	}
	return n
}

// probeNameNode returns the node of a probe reference's probe: value.
func probeNameNode(n *yaml.Node) *yaml.Node {
	if n != nil && n.Kind == yaml.MappingNode {
		for i := 0; i+1 < len(n.Content); i += 2 {
			if n.Content[i].Value == "probe" {
				return section.Resolve(n.Content[i+1])
			}
		}
	}
	return n
}

// checkBinary checks a source against the probes of its binary, when the
// binary is present and readable here.
func (d *srcDecoder) checkBinary(s *SpanSource, has map[string]*yaml.Node) {
	if s.PID != 0 || s.Binary == "" {
		return
	}
	f, ok := d.files[s.Binary]
	if !ok {
		var err error
		f, err = Open(s.Binary)
		switch {
		case err == nil:
		case errors.Is(err, fs.ErrNotExist) || errors.Is(err, fs.ErrPermission):
			f = nil // checked when it attaches, on the host it runs on
		case errors.Is(err, ErrNoProbes):
			d.errorf(has["binary"], "%s has no USDT probes (spanwatch probes %s lists a binary's probes)", s.Binary, s.Binary)
			f = nil
		default:
			d.errorf(has["binary"], "%v", err)
			f = nil
		}
		d.files[s.Binary] = f
	}
	if f == nil {
		return
	}
	for _, r := range s.roles(has) {
		sites := f.Lookup(r.ref.Provider, r.ref.Name)
		if len(sites) == 0 {
			d.errorf(probeNameNode(has[r.name]), "probe %s not found in %s%s", r.ref, s.Binary, suggestProbe(f, r.ref))
			continue
		}
		reported := map[string]bool{}
		for _, u := range r.uses {
			for _, p := range sites {
				if reported[u.what+strconv.Itoa(u.arg)] {
					break
				}
				var msg string
				switch {
				case p.ArgErr != nil:
					msg = fmt.Sprintf("%s reads argument %d of %s, whose arguments at %#x cannot be parsed: %v", u.what, u.arg, p.FullName(), p.Address, p.ArgErr)
				case u.arg >= len(p.Args):
					msg = fmt.Sprintf("%s reads arg%d, but %s has %d argument%s at %#x (arg0 to arg%d)", u.what, u.arg, p.FullName(), len(p.Args), plural(len(p.Args)), p.Address, len(p.Args)-1)
					if len(p.Args) == 0 {
						msg = fmt.Sprintf("%s reads arg%d, but %s has no arguments at %#x", u.what, u.arg, p.FullName(), p.Address)
					}
				case u.ptr && p.Args[u.arg].Size != 8:
					msg = fmt.Sprintf("%s: arg%d of %s is a %d-byte value at %#x, not a pointer to a string", u.what, u.arg, p.FullName(), p.Args[u.arg].Size, p.Address)
				default:
					continue
				}
				reported[u.what+strconv.Itoa(u.arg)] = true
				node := u.node
				if node == nil {
					node = has[r.name]
				}
				if u.off >= 0 && node.Kind == yaml.ScalarNode {
					d.ErrorInScalar(node, u.off, msg)
				} else {
					d.errorf(node, "%s", msg)
				}
			}
		}
	}
}

func plural(n int) string {
	if n == 1 {
		return ""
	}
	return "s"
}

// suggestProbe names the probe of f nearest to ref, as a hint.
func suggestProbe(f *File, ref ProbeRef) string {
	seen := map[string]bool{}
	var names, full []string
	for _, p := range f.Probes {
		if seen[p.FullName()] {
			continue
		}
		seen[p.FullName()] = true
		full = append(full, p.FullName())
		if p.Provider == ref.Provider {
			names = append(names, p.Name)
		}
	}
	if near := srcspec.Nearest(ref.Name, names); near != "" {
		return fmt.Sprintf(": did you mean %s?", near)
	}
	if near := srcspec.Nearest(ref.String(), full); near != "" {
		return fmt.Sprintf(": did you mean %s?", near)
	}
	sort.Strings(full)
	if len(full) > 8 {
		return fmt.Sprintf(" (it has %d probes: spanwatch probes %s lists them)", len(full), f.Path)
	}
	return fmt.Sprintf(" (it has %s)", strings.Join(full, ", "))
}
