package usdt

import (
	"errors"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"
)

// A ProbeRef names a USDT probe.
type ProbeRef struct {
	Provider string
	Name     string
}

func (r ProbeRef) String() string { return r.Provider + ":" + r.Name }

// A SpanSource makes spans from USDT probes: either a Start/End pair, timed
// in the kernel from one to the other, or one Probe whose DurationArg holds
// the duration in nanoseconds.
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
	Start   ProbeRef
	End     ProbeRef
	Probe   ProbeRef
	// KeyArg pairs start and end by an argument (a request id) present in
	// both, instead of by thread. -1: by thread.
	KeyArg int
	// StatusArg is an argument (of the end probe, or the single probe)
	// whose nonzero value marks the span as an error. -1: none.
	StatusArg int
	// DurationArg is the single probe's argument holding the duration.
	DurationArg int // -1: none (a pair)
	// Pos is where the source is declared, "file:line:col".
	Pos string
}

// Paired reports whether the source is a start/end pair.
func (s *SpanSource) Paired() bool { return s.DurationArg < 0 }

// Describe names the source for logs and errors.
func (s *SpanSource) Describe() string {
	where := s.Binary
	if s.PID != 0 {
		where = fmt.Sprintf("pid %d", s.PID)
		if s.Binary != "" {
			where += " " + s.Binary
		}
	}
	name := s.Span
	if name == "" {
		name = fmt.Sprintf("name_arg %d", s.NameArg)
	}
	if s.Paired() {
		return fmt.Sprintf("usdt span %s (%s..%s in %s)", name, s.Start, s.End, where)
	}
	return fmt.Sprintf("usdt span %s (%s in %s)", name, s.Probe, where)
}

// maxSpanName is the longest span name: struct span_event has 64 bytes with
// room for the terminating NUL.
const maxSpanName = 63

// ParseSources decodes the sources: section of a config file (node is the
// section's value; filename is for error positions and for resolving
// relative binary paths). Unknown keys and invalid combinations are errors
// of the form "file:line:col: message"; all of them are reported, joined.
func ParseSources(filename string, node *yaml.Node) ([]SpanSource, error) {
	d := &srcDecoder{file: filename}
	if node == nil {
		return nil, nil
	}
	node = deref(node)
	if node.Kind == yaml.DocumentNode && len(node.Content) == 1 {
		node = deref(node.Content[0])
	}
	if node.Kind == yaml.ScalarNode && node.Tag == "!!null" {
		return nil, nil
	}
	var out []SpanSource
	// user_events: and eventheader: are internal/tpsource's to decode.
	d.mapping(node, "sources", []string{"usdt", "user_events", "eventheader"}, func(key string, v *yaml.Node) {
		if key != "usdt" {
			return
		}
		v = deref(v)
		if v.Kind == yaml.ScalarNode && v.Tag == "!!null" {
			return
		}
		if v.Kind != yaml.SequenceNode {
			d.errorf(v, "sources.usdt must be a list of span sources")
			return
		}
		for _, item := range v.Content {
			if s, ok := d.source(item); ok {
				out = append(out, s)
			}
		}
	})
	if len(d.errs) > 0 {
		return nil, errors.Join(d.errs...)
	}
	return out, nil
}

type srcDecoder struct {
	file string
	errs []error
}

func deref(n *yaml.Node) *yaml.Node {
	for i := 0; n.Kind == yaml.AliasNode && n.Alias != nil && i < 8; i++ {
		n = n.Alias
	}
	return n
}

func (d *srcDecoder) pos(n *yaml.Node) string {
	return fmt.Sprintf("%s:%d:%d", d.file, n.Line, n.Column)
}

func (d *srcDecoder) errorf(n *yaml.Node, format string, a ...any) {
	d.errs = append(d.errs, fmt.Errorf("%s: %s", d.pos(n), fmt.Sprintf(format, a...)))
}

// mapping walks a mapping whose keys must be in keys, rejecting unknown and
// repeated keys.
func (d *srcDecoder) mapping(n *yaml.Node, what string, keys []string, f func(key string, v *yaml.Node)) bool {
	if n.Kind != yaml.MappingNode {
		d.errorf(n, "%s must be a mapping", what)
		return false
	}
	seen := map[string]bool{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k := deref(n.Content[i])
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
			d.errorf(k, "%s: unknown key %q (known: %s)", what, k.Value, strings.Join(keys, ", "))
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
	n = deref(n)
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
	n = deref(n)
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

func (d *srcDecoder) probeRef(n *yaml.Node, what string) (ProbeRef, bool) {
	var r ProbeRef
	ok := true
	n = deref(n)
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
	"binary", "pid", "span", "name_arg", "start", "end", "probe",
	"key", "key_arg", "status_arg", "duration_arg",
}

func (d *srcDecoder) source(n *yaml.Node) (SpanSource, bool) {
	n = deref(n)
	s := SpanSource{NameArg: -1, KeyArg: -1, StatusArg: -1, DurationArg: -1, Pos: d.pos(n)}
	before := len(d.errs)
	const what = "usdt source"
	has := map[string]*yaml.Node{}
	argMax := MaxArgs - 1
	if !d.mapping(n, what, sourceKeys, func(key string, v *yaml.Node) {
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
				if len(name) > maxSpanName {
					d.errorf(v, "span name is %d bytes, more than %d", len(name), maxSpanName)
				}
				s.Span = name
			}
		case "name_arg":
			s.NameArg, _ = d.intIn(v, key, 0, argMax)
		case "key_arg":
			s.KeyArg, _ = d.intIn(v, key, 0, argMax)
		case "status_arg":
			s.StatusArg, _ = d.intIn(v, key, 0, argMax)
		case "duration_arg":
			s.DurationArg, _ = d.intIn(v, key, 0, argMax)
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
	if len(d.errs) > before {
		return s, false
	}
	switch {
	case has["binary"] == nil && has["pid"] == nil:
		d.errorf(n, "usdt source needs binary: (every process running it) or pid:")
	case has["span"] != nil && has["name_arg"] != nil:
		d.errorf(has["name_arg"], "give span: or name_arg:, not both")
	case has["span"] == nil && has["name_arg"] == nil:
		d.errorf(n, "usdt source needs span: NAME or name_arg: N")
	}
	pair := has["start"] != nil || has["end"] != nil
	single := has["probe"] != nil
	switch {
	case pair && single:
		d.errorf(has["probe"], "give start: and end: (a pair) or probe: with duration_arg: (one probe), not both")
	case pair && (has["start"] == nil || has["end"] == nil):
		d.errorf(n, "a start/end pair needs both start: and end:")
	case pair && has["duration_arg"] != nil:
		d.errorf(has["duration_arg"], "duration_arg is for a single probe:, a start/end pair is timed in the kernel")
	case single && has["duration_arg"] == nil:
		d.errorf(has["probe"], "a single probe: needs duration_arg: N (the argument holding the duration in ns)")
	case single && (has["key"] != nil || has["key_arg"] != nil):
		d.errorf(n, "key and key_arg pair a start with an end: not for a single probe:")
	case !pair && !single:
		d.errorf(n, "usdt source needs start: and end:, or probe: with duration_arg:")
	}
	if has["key"] != nil && has["key_arg"] != nil {
		d.errorf(has["key_arg"], "give key: thread or key_arg: N, not both")
	}
	if len(d.errs) > before {
		return s, false
	}
	if s.Binary != "" && s.PID == 0 && !filepath.IsAbs(s.Binary) {
		s.Binary = filepath.Join(filepath.Dir(d.file), s.Binary)
	}
	return s, true
}
