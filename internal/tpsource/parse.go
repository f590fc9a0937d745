package tpsource

import (
	"fmt"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/spanwatch/spanwatch/config/section"
	"github.com/spanwatch/spanwatch/internal/srcspec"
	"github.com/spanwatch/spanwatch/internal/typo"
)

// MaxOperands bounds the fields an error: predicate and labels: read:
// bpf/source.h's SRC_OPERANDS for user_events; for EventHeader events the
// decoder's wanted fields (12) leave room for 8 besides the name,
// duration and key.
var MaxOperands = map[Kind]int{UserEvents: srcspec.MaxOperands, EventHeader: 8}

// MaxSpanName is the longest fixed span name: the span event holds
// SPAN_NAME_LEN (128) bytes with room for the terminating NUL.
const MaxSpanName = 127

// DecodeSources decodes the user_events: or eventheader: list (kind) of
// the configuration file's sources: section (n is the list), reporting
// every problem into d at its position. Package config calls it for the
// configuration file.
func DecodeSources(d *section.Decoder, kind Kind, n *yaml.Node) []Source {
	td := &decoder{d}
	n = section.Resolve(n)
	if section.IsNull(n) {
		return nil
	}
	if n.Kind != yaml.SequenceNode {
		td.errorf(n, "sources.%s must be a list of span sources", kind)
		return nil
	}
	before := d.Len()
	var out []Source
	for _, item := range n.Content {
		if s, ok := td.source(kind, item); ok {
			out = append(out, s)
		}
	}
	if d.Len() > before {
		return nil
	}
	return out
}

type decoder struct {
	*section.Decoder
}

func (d *decoder) errorf(n *yaml.Node, format string, a ...any) { d.Errorf(n, format, a...) }

func (d *decoder) str(n *yaml.Node, what string) (string, bool) {
	n = section.Resolve(n)
	if n.Kind != yaml.ScalarNode || n.Tag == "!!null" {
		d.errorf(n, "%s must be a string", what)
		return "", false
	}
	if n.Value == "" {
		d.errorf(n, "%s must not be empty", what)
		return "", false
	}
	return n.Value, true
}

// name checks a user_event or EventHeader event name.
func (d *decoder) name(n *yaml.Node, what string) (string, bool) {
	s, ok := d.str(n, what)
	if !ok {
		return "", false
	}
	for _, r := range s {
		if !(r == '_' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9') {
			d.errorf(n, "%s %q: only letters, digits and _ are allowed", what, s)
			return "", false
		}
	}
	return s, true
}

func (d *decoder) uint(n *yaml.Node, what string, max uint64) (uint64, bool) {
	n = section.Resolve(n)
	if n.Kind != yaml.ScalarNode || n.Tag != "!!int" {
		d.errorf(n, "%s must be an integer", what)
		return 0, false
	}
	v, err := strconv.ParseUint(n.Value, 0, 64)
	if err != nil || v > max {
		d.errorf(n, "%s must be between 0 and %d, not %s", what, max, n.Value)
		return 0, false
	}
	return v, true
}

// field decodes a field: a name, a dotted path (EventHeader), or a list
// of names (EventHeader, for names that contain dots).
func (d *decoder) field(kind Kind, n *yaml.Node, what string) (Field, bool) {
	n = section.Resolve(n)
	if n.Kind == yaml.SequenceNode {
		if kind != EventHeader {
			d.errorf(n, "%s: a user_event field is one name", what)
			return nil, false
		}
		var f Field
		for _, c := range n.Content {
			s, ok := d.str(c, what)
			if !ok {
				return nil, false
			}
			f = append(f, s)
		}
		if len(f) == 0 {
			d.errorf(n, "%s must name a field", what)
			return nil, false
		}
		if len(f) > 5 {
			d.errorf(n, "%s: structs nest at most 4 deep", what)
			return nil, false
		}
		return f, true
	}
	s, ok := d.str(n, what)
	if !ok {
		return nil, false
	}
	if kind == UserEvents {
		if strings.ContainsAny(s, " \t;:[]") {
			d.errorf(n, "%s %q is not a field name", what, s)
			return nil, false
		}
		return Field{s}, true
	}
	f := Field(strings.Split(s, "."))
	for _, p := range f {
		if p == "" {
			d.errorf(n, "%s %q: empty name in the path (a field whose name has dots is written as a list: [PartC, http.route])", what, s)
			return nil, false
		}
	}
	if len(f) > 5 {
		d.errorf(n, "%s: structs nest at most 4 deep", what)
		return nil, false
	}
	return f, true
}

var keys = map[Kind][]string{
	UserEvents:  {"event", "start", "end", "span", "name_field", "duration_field", "key", "key_field", "status_field", "error", "labels", "label_cap", "metric", "value_field"},
	EventHeader: {"provider", "level", "keyword", "event", "start", "end", "span", "name_field", "duration_field", "key", "key_field", "status_field", "error", "labels", "label_cap", "metric", "value_field"},
}

// resolver names operands by field: the i-th distinct field an error:
// predicate or labels: names is operand i.
func (s *Source) resolver() srcspec.Resolver {
	return func(name string) (int, error) {
		var f Field
		if s.Kind == UserEvents {
			if strings.ContainsAny(name, ".[]") {
				return 0, fmt.Errorf("%q is not a field name", name)
			}
			f = Field{name}
		} else {
			f = Field(strings.Split(name, "."))
			for _, p := range f {
				if p == "" {
					return 0, fmt.Errorf("%q: empty name in the path", name)
				}
			}
		}
		for i, o := range s.Operands {
			if o.String() == f.String() {
				return i, nil
			}
		}
		if len(s.Operands) == MaxOperands[s.Kind] {
			return 0, fmt.Errorf("more than %d fields read by error: and labels:", MaxOperands[s.Kind])
		}
		s.Operands = append(s.Operands, f)
		return len(s.Operands) - 1, nil
	}
}

func (d *decoder) source(kind Kind, n *yaml.Node) (Source, bool) {
	n = section.Resolve(n)
	s := Source{Kind: kind, Pos: section.At(d.File, n)}
	before := d.Len()
	what := string(kind) + " source"
	if n.Kind != yaml.MappingNode {
		d.errorf(n, "%s must be a mapping", what)
		return s, false
	}
	known := keys[kind]
	has := map[string]*yaml.Node{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := section.Resolve(n.Content[i]), n.Content[i+1]
		if k.Kind != yaml.ScalarNode {
			d.errorf(k, "%s: keys must be strings", what)
			continue
		}
		ok := false
		for _, want := range known {
			ok = ok || k.Value == want
		}
		if !ok {
			hint := ""
			if near := typo.Nearest(k.Value, known, 2); near != "" {
				hint = fmt.Sprintf("; did you mean %s?", near)
			}
			d.errorf(k, "%s: unknown key %q (known: %s)%s", what, k.Value, strings.Join(known, ", "), hint)
			continue
		}
		if has[k.Value] != nil {
			d.errorf(k, "%s: %s given twice", what, k.Value)
			continue
		}
		has[k.Value] = v
		switch k.Value {
		case "event":
			s.Event, _ = d.name(v, "event")
		case "start":
			s.Start, _ = d.name(v, "start")
		case "end":
			s.End, _ = d.name(v, "end")
		case "provider":
			s.Provider, _ = d.name(v, "provider")
		case "level":
			lv, _ := d.uint(v, "level", 255)
			s.Level = uint8(lv)
		case "keyword":
			s.Keyword, _ = d.uint(v, "keyword", ^uint64(0))
		case "span":
			if name, ok := d.str(v, "span"); ok {
				if len(name) > MaxSpanName {
					d.errorf(v, "span name is %d bytes, more than %d", len(name), MaxSpanName)
				}
				s.Span = name
			}
		case "name_field":
			s.NameField, _ = d.field(kind, v, "name_field")
		case "duration_field":
			s.DurationField, _ = d.field(kind, v, "duration_field")
		case "key_field":
			s.KeyField, _ = d.field(kind, v, "key_field")
		case "status_field":
			s.StatusField, _ = d.field(kind, v, "status_field")
		case "error":
			s.Error = srcspec.DecodePredicate(d.Decoder, section.Resolve(v), s.resolver())
		case "labels":
			s.Labels.List, _ = srcspec.DecodeLabels(d.Decoder, section.Resolve(v), s.resolver())
		case "label_cap":
			s.Labels.Cap, _ = srcspec.DecodeLabelCap(d.Decoder, section.Resolve(v))
		case "metric":
			if name, ok := d.str(v, "metric"); ok {
				if len(name) > MaxSpanName {
					d.errorf(v, "metric name is %d bytes, more than %d", len(name), MaxSpanName)
				}
				s.Metric = name
			}
		case "value_field":
			s.ValueField, _ = d.field(kind, v, "value_field")
		case "key":
			if k, ok := d.str(v, "key"); ok && k != "thread" {
				d.errorf(v, `key must be "thread" (use key_field: FIELD to pair by a field)`)
			}
		}
	}
	if d.Len() > before {
		return s, false
	}
	d.check(&s, n, has)
	if d.Len() > before {
		return s, false
	}
	return s, true
}

// check reports the combinations that cannot work.
func (d *decoder) check(s *Source, n *yaml.Node, has map[string]*yaml.Node) {
	if s.Kind == EventHeader && has["provider"] == nil {
		d.errorf(n, "eventheader source needs provider: (the tracepoints PROVIDER_L<level>K<keyword>)")
	}
	pair := has["start"] != nil || has["end"] != nil
	single := has["event"] != nil
	switch {
	case pair && single:
		d.errorf(has["event"], "give event: (one event) or start: and end: (a pair), not both")
		return
	case pair && (has["start"] == nil || has["end"] == nil):
		d.errorf(n, "a start/end pair needs both start: and end:")
		return
	case pair && s.Start == s.End:
		d.errorf(has["end"], "start and end are the same event")
		return
	case !pair && !single && s.Kind == UserEvents:
		d.errorf(n, "user_events source needs event: (with duration_field: or a metric:) or start: and end:")
		return
	case !pair && !single && has["metric"] != nil:
		d.errorf(has["metric"], "a metric takes one event: give event:")
		return
	}
	if has["error"] != nil && has["status_field"] != nil {
		d.errorf(has["status_field"], "give error: PREDICATE or status_field: FIELD (its nonzero values), not both")
	}
	if has["label_cap"] != nil && has["labels"] == nil {
		d.errorf(has["label_cap"], "label_cap bounds the values of labels: and there are none")
	}
	if has["metric"] != nil || has["value_field"] != nil {
		switch {
		case has["metric"] == nil:
			d.errorf(has["value_field"], "value_field is for a metric: (a value series); give metric: NAME")
		case has["value_field"] == nil:
			d.errorf(has["metric"], "a metric needs value_field: FIELD (the integer field whose values it takes)")
		case !single:
			d.errorf(has["metric"], "a metric takes one event: give event:, not start: and end:")
		}
		for _, k := range []string{"span", "name_field", "duration_field", "key", "key_field"} {
			if has[k] != nil {
				d.errorf(has[k], "%s is for spans: a metric: has a name and a value_field:", k)
			}
		}
		return
	}
	if s.SpanEvents() {
		// The OpenTelemetry Span mapping: nothing else to say.
		for _, k := range []string{"span", "name_field", "duration_field", "key", "key_field", "status_field", "error", "labels", "label_cap"} {
			if has[k] != nil {
				d.errorf(has[k], "%s maps fields of an event: with no event: the source takes the provider's OpenTelemetry Span events, whose fields are known", k)
			}
		}
		return
	}
	switch {
	case has["span"] != nil && has["name_field"] != nil:
		d.errorf(has["name_field"], "give span: or name_field:, not both")
	case has["span"] == nil && has["name_field"] == nil:
		d.errorf(n, "%s source needs span: NAME or name_field: FIELD", s.Kind)
	}
	switch {
	case pair && has["duration_field"] != nil:
		d.errorf(has["duration_field"], "duration_field is for a single event: a start/end pair is timed in the kernel")
	case single && has["duration_field"] == nil:
		d.errorf(has["event"], "a single event needs duration_field: FIELD (its duration in ns)")
	case single && (has["key"] != nil || has["key_field"] != nil):
		d.errorf(n, "key and key_field pair a start with an end: not for a single event")
	}
	if has["key"] != nil && has["key_field"] != nil {
		d.errorf(has["key_field"], "give key: thread or key_field: FIELD, not both")
	}
}
