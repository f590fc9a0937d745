package tpsource

import (
	"reflect"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"

	"github.com/spanwatch/spanwatch/config/section"
)

func sourcesNode(t *testing.T, doc string) *yaml.Node {
	t.Helper()
	var root yaml.Node
	if err := yaml.Unmarshal([]byte(doc), &root); err != nil {
		t.Fatal(err)
	}
	m := root.Content[0]
	for i := 0; i+1 < len(m.Content); i += 2 {
		if m.Content[i].Value == "sources" {
			return m.Content[i+1]
		}
	}
	t.Fatal("no sources: in document")
	return nil
}

// ParseSources decodes the user_events: and eventheader: lists of a
// sources: section (node), in file order, as package config does.
func ParseSources(file string, node *yaml.Node) ([]Source, error) {
	d := section.NewDecoder(file, nil)
	var out []Source
	for i := 0; i+1 < len(node.Content); i += 2 {
		if k := Kind(node.Content[i].Value); k == UserEvents || k == EventHeader {
			out = append(out, DecodeSources(d, k, node.Content[i+1])...)
		}
	}
	if err := d.Err(); err != nil {
		return nil, err
	}
	return out, nil
}

func TestParseSources(t *testing.T) {
	doc := `
sources:
  usdt:
    - binary: /bin/x
  user_events:
    - event: uev_req
      span: checkout
      duration_field: dur_ns
      status_field: status
    - start: uev_begin
      end: uev_end
      key_field: req_id
      name_field: route
    - event: uev_stock
      metric: stock.delta
      value_field: delta
  eventheader:
    - provider: opentelemetry_traces
    - provider: myapp
      level: 4
      keyword: 0x3
      event: Request
      name_field: PartB.route
      duration_field: [PartC, "dur.ns"]
      status_field: PartB.failed
`
	got, err := ParseSources("r.yaml", sourcesNode(t, doc))
	if err != nil {
		t.Fatal(err)
	}
	want := []Source{
		{Kind: UserEvents, Event: "uev_req", Span: "checkout", DurationField: Field{"dur_ns"}, StatusField: Field{"status"}, Pos: section.Pos{File: "r.yaml", Line: 6, Col: 7}},
		{Kind: UserEvents, Start: "uev_begin", End: "uev_end", KeyField: Field{"req_id"}, NameField: Field{"route"}, Pos: section.Pos{File: "r.yaml", Line: 10, Col: 7}},
		{Kind: UserEvents, Event: "uev_stock", Metric: "stock.delta", ValueField: Field{"delta"}, Pos: section.Pos{File: "r.yaml", Line: 14, Col: 7}},
		{Kind: EventHeader, Provider: "opentelemetry_traces", Pos: section.Pos{File: "r.yaml", Line: 18, Col: 7}},
		{Kind: EventHeader, Provider: "myapp", Level: 4, Keyword: 3, Event: "Request", NameField: Field{"PartB", "route"},
			DurationField: Field{"PartC", "dur.ns"}, StatusField: Field{"PartB", "failed"}, Pos: section.Pos{File: "r.yaml", Line: 19, Col: 7}},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got\n%+v\nwant\n%+v", got, want)
	}
	if !got[3].SpanEvents() || got[4].SpanEvents() || !got[1].Paired() || !got[2].IsMetric() {
		t.Error("SpanEvents/Paired/IsMetric")
	}
	for i, d := range []string{
		"user_events span checkout (uev_req)",
		"user_events span name_field route (uev_begin..uev_end)",
		"user_events metric stock.delta (uev_stock)",
		"eventheader Span events (opentelemetry_traces)",
		"eventheader span name_field PartB.route (Request of myapp level<=4 keyword&0x3)",
	} {
		if got[i].Describe() != d {
			t.Errorf("Describe %d = %q, want %q", i, got[i].Describe(), d)
		}
	}
}

func TestParseSourcesPredicateAndLabels(t *testing.T) {
	got, err := ParseSources("r.yaml", sourcesNode(t, `
sources:
  eventheader:
    - provider: web
      event: Request
      span: request
      duration_field: PartC.dur
      error: "PartB.status >= 500 and PartB.retries != 0"
      labels: {status: PartB.status, region: PartA.region}
      label_cap: 50
`))
	if err != nil {
		t.Fatal(err)
	}
	s := got[0]
	if len(s.Operands) != 3 || s.Operands[0].String() != "PartB.status" || s.Operands[1].String() != "PartB.retries" || s.Operands[2].String() != "PartA.region" {
		t.Fatalf("operands %v", s.Operands)
	}
	if s.Error == nil || len(s.Labels.List) != 2 || s.Labels.Cap != 50 || s.Labels.List[1].Operand != 2 {
		t.Fatalf("error %v labels %+v", s.Error, s.Labels)
	}
}

func TestParseSourcesErrors(t *testing.T) {
	for _, tc := range []struct {
		name, doc string
		want      []string
	}{
		{"not a list", "sources:\n  user_events: {event: x}\n", []string{"f:2:16: sources.user_events must be a list"}},
		{"unknown key", "sources:\n  user_events:\n    - event: x\n      span: s\n      duraton_field: d\n",
			[]string{`f:5:7: user_events source: unknown key "duraton_field"`, "did you mean duration_field?"}},
		{"provider key on user_events", "sources:\n  user_events:\n    - event: x\n      provider: p\n", []string{`f:4:7: user_events source: unknown key "provider"`}},
		{"no event", "sources:\n  user_events:\n    - span: s\n", []string{"f:3:7: user_events source needs event:"}},
		{"both", "sources:\n  user_events:\n    - {event: a, start: b, end: c, span: s}\n", []string{"f:3:15: give event: (one event) or start: and end:"}},
		{"half a pair", "sources:\n  user_events:\n    - {start: b, span: s}\n", []string{"f:3:7: a start/end pair needs both"}},
		{"same event twice", "sources:\n  user_events:\n    - {start: b, end: b, span: s}\n", []string{"f:3:23: start and end are the same event"}},
		{"no name", "sources:\n  user_events:\n    - {event: a, duration_field: d}\n", []string{"f:3:7: user_events source needs span: NAME or name_field: FIELD"}},
		{"two names", "sources:\n  user_events:\n    - {event: a, duration_field: d, span: s, name_field: n}\n", []string{"f:3:58: give span: or name_field:"}},
		{"no duration", "sources:\n  user_events:\n    - {event: a, span: s}\n", []string{"f:3:15: a single event needs duration_field"}},
		{"duration on a pair", "sources:\n  user_events:\n    - {start: a, end: b, span: s, duration_field: d}\n", []string{"f:3:51: duration_field is for a single event"}},
		{"key on a single", "sources:\n  user_events:\n    - {event: a, span: s, duration_field: d, key_field: k}\n", []string{"f:3:7: key and key_field pair"}},
		{"bad key", "sources:\n  user_events:\n    - {start: a, end: b, span: s, key: request}\n", []string{`f:3:40: key must be "thread"`}},
		{"bad event name", "sources:\n  user_events:\n    - {event: a-b, span: s, duration_field: d}\n", []string{`f:3:15: event "a-b": only letters`}},
		{"long span", "sources:\n  user_events:\n    - {event: a, duration_field: d, span: " + strings.Repeat("x", 128) + "}\n", []string{"span name is 128 bytes, more than 127"}},
		{"path on user_events", "sources:\n  user_events:\n    - {event: a, span: s, duration_field: [a, b]}\n", []string{"f:3:43: duration_field: a user_event field is one name"}},
		{"no provider", "sources:\n  eventheader:\n    - {event: a, span: s, duration_field: d}\n", []string{"f:3:7: eventheader source needs provider:"}},
		{"fields on Span events", "sources:\n  eventheader:\n    - {provider: p, span: s}\n", []string{"f:3:27: span maps fields of an event"}},
		{"bad level", "sources:\n  eventheader:\n    - {provider: p, level: 300}\n", []string{"f:3:28: level must be between 0 and 255, not 300"}},
		{"empty path part", "sources:\n  eventheader:\n    - {provider: p, event: e, span: s, duration_field: PartB..d}\n", []string{`empty name in the path`}},
		{"metric without value", "sources:\n  user_events:\n    - {event: a, metric: m}\n", []string{"a metric needs value_field"}},
		{"value without metric", "sources:\n  user_events:\n    - {event: a, span: s, duration_field: d, value_field: v}\n", []string{"value_field is for a metric:"}},
		{"metric of a pair", "sources:\n  user_events:\n    - {start: a, end: b, metric: m, value_field: v}\n", []string{"a metric takes one event"}},
		{"metric with a span name", "sources:\n  user_events:\n    - {event: a, metric: m, value_field: v, span: s}\n", []string{"span is for spans"}},
		{"error and status_field", "sources:\n  user_events:\n    - {event: a, span: s, duration_field: d, error: \"x > 1\", status_field: x}\n", []string{"give error: PREDICATE or status_field"}},
		{"bad predicate", "sources:\n  user_events:\n    - {event: a, span: s, duration_field: d, error: \"x => 1\"}\n", []string{`error: unknown operator "=>": did you mean >=?`}},
		{"dotted field in user_events predicate", "sources:\n  user_events:\n    - {event: a, span: s, duration_field: d, error: \"a.b > 1\"}\n", []string{`"a.b" is not a field name`}},
		{"label_cap without labels", "sources:\n  user_events:\n    - {event: a, span: s, duration_field: d, label_cap: 5}\n", []string{"label_cap bounds the values of labels"}},
		{"labels on Span events", "sources:\n  eventheader:\n    - {provider: p, labels: {s: PartB.x}}\n", []string{"labels maps fields of an event"}},
		{"every error at once", "sources:\n  user_events:\n    - {event: a}\n    - {start: b}\n  eventheader:\n    - {level: 1}\n",
			[]string{"f:3:7:", "f:4:7:", "f:6:7:"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseSources("f", sourcesNode(t, tc.doc))
			if err == nil {
				t.Fatal("no error")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error\n%v\ndoes not contain\n%s", err, w)
				}
			}
		})
	}
}
