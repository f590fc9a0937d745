package usdt

import (
	"reflect"
	"strings"
	"testing"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/spanwatch/spanwatch/config/section"
)

// sourcesNode parses a whole config file and returns its sources: value,
// as the config loader hands it over.
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

// ParseSources decodes the usdt: list of a sources: section (node) as
// package config does, which walks the section: other kinds of source are
// skipped, a key that is no kind of source is refused.
func ParseSources(file string, node *yaml.Node) ([]SpanSource, error) {
	d := section.NewDecoder(file, nil)
	var out []SpanSource
	for i := 0; i+1 < len(node.Content); i += 2 {
		switch k := node.Content[i]; k.Value {
		case "usdt":
			out = append(out, DecodeSources(d, node.Content[i+1])...)
		case "user_events", "eventheader":
		default:
			d.Errorf(k, "sources: unknown key %q (known: usdt, user_events, eventheader)", k.Value)
		}
	}
	if err := d.Err(); err != nil {
		return nil, err
	}
	return out, nil
}

func TestParseSources(t *testing.T) {
	doc := `
budgets: []
sources:
  usdt:
    - binary: /usr/sbin/mysqld
      span: query
      start: {provider: mysql, probe: query__start}
      end:   {provider: mysql, probe: query__done}
      key: thread
      status_arg: 2
    - binary: ./app
      probe: {provider: app, probe: request_done}
      duration_arg: 1
      span: request
    - pid: 4242
      name_arg: 1
      start: {provider: app, probe: begin}
      end: {provider: app, probe: end}
      key_arg: 0
      silent_after: 1m30s
`
	got, err := ParseSources("/etc/spanwatch/rules.yaml", sourcesNode(t, doc))
	if err != nil {
		t.Fatal(err)
	}
	want := []SpanSource{
		{
			Binary: "/usr/sbin/mysqld", Span: "query", NameArg: -1,
			Start: ProbeRef{"mysql", "query__start"}, End: ProbeRef{"mysql", "query__done"},
			KeyArg: -1, StatusArg: 2, DurationArg: -1, ValueArg: -1, SilentAfter: DefaultSilentAfter, Pos: section.Pos{File: "/etc/spanwatch/rules.yaml", Line: 5, Col: 7},
		},
		{
			Binary: "/etc/spanwatch/app", Span: "request", NameArg: -1,
			Probe: ProbeRef{"app", "request_done"}, KeyArg: -1, StatusArg: -1, DurationArg: 1, ValueArg: -1, SilentAfter: DefaultSilentAfter,
			Pos: section.Pos{File: "/etc/spanwatch/rules.yaml", Line: 11, Col: 7},
		},
		{
			PID: 4242, NameArg: 1, Start: ProbeRef{"app", "begin"}, End: ProbeRef{"app", "end"},
			KeyArg: 0, StatusArg: -1, DurationArg: -1, ValueArg: -1, SilentAfter: 90 * time.Second, Pos: section.Pos{File: "/etc/spanwatch/rules.yaml", Line: 15, Col: 7},
		},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got\n%+v\nwant\n%+v", got, want)
	}
	if !got[0].Paired() || got[1].Paired() {
		t.Errorf("Paired: %v %v", got[0].Paired(), got[1].Paired())
	}
	if p := got[0].Predicate(); p == nil || p.String() != "$2 != 0" {
		t.Errorf("status_arg 2 gives predicate %v, want $2 != 0", p)
	}
}

// TestParseSourcesVocabulary decodes error predicates, labels, label caps,
// argument metrics and single probes without a duration.
func TestParseSourcesVocabulary(t *testing.T) {
	doc := `
sources:
  usdt:
    - binary: /srv/app
      name_arg: 0
      start: {provider: app, probe: request__start}
      end: {provider: app, probe: request__done}
      error: "arg0 >= 500 or arg1 < 0"
      labels: {status: arg0, method: arg2}
      label_cap: 20
    - binary: /srv/app
      metric: queue.depth
      probe: {provider: app, probe: queue}
      value_arg: 1
    - binary: /usr/bin/python3.11
      name_arg: 1
      probe: {provider: python, probe: function__return}
`
	got, err := ParseSources("f.yaml", sourcesNode(t, doc))
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 3 {
		t.Fatalf("%d sources", len(got))
	}
	a, m, e := got[0], got[1], got[2]
	if a.Error == nil || a.Error.String() != "$0 >= 500 or $1 < 0" || a.Predicate() != a.Error {
		t.Errorf("error: %v", a.Error)
	}
	if len(a.Labels.List) != 2 || a.Labels.List[0].Name != "status" || a.Labels.List[0].Operand != 0 ||
		a.Labels.List[1].Name != "method" || a.Labels.List[1].Operand != 2 || a.Labels.Cap != 20 {
		t.Errorf("labels: %+v", a.Labels)
	}
	if !m.IsMetric() || m.Metric != "queue.depth" || m.ValueArg != 1 || m.Paired() || m.Describe() != "usdt metric queue.depth (app:queue in /srv/app)" {
		t.Errorf("metric: %+v, %s", m, m.Describe())
	}
	if e.Paired() || e.IsMetric() || e.DurationArg != -1 || e.NameArg != 1 {
		t.Errorf("single probe without a duration: %+v", e)
	}
}

func TestParseSourcesErrors(t *testing.T) {
	tests := []struct {
		name, doc string
		want      []string
	}{
		{"unknown kind", "sources:\n  uprobes: []\n", []string{`f.yaml:2:3: sources: unknown key "uprobes" (known: usdt, user_events, eventheader)`}},
		{"not a list", "sources:\n  usdt: {binary: x}\n", []string{"f.yaml:2:9: sources.usdt must be a list"}},
		{"unknown key", "sources:\n  usdt:\n    - binary: /x\n      span: a\n      probe: {provider: p, probe: q}\n      duration_arg: 0\n      colour: red\n",
			[]string{`f.yaml:7:7: usdt source: unknown key "colour"`}},
		{"near key", "sources:\n  usdt:\n    - binary: /x\n      span: a\n      probe: {provider: p, probe: q}\n      lables: {a: arg1}\n",
			[]string{`f.yaml:6:7: usdt source: unknown key "lables"`, "did you mean labels?"}},
		{"no target", "sources:\n  usdt:\n    - span: a\n      probe: {provider: p, probe: q}\n      duration_arg: 0\n",
			[]string{"f.yaml:3:7: usdt source needs binary: (every process running it) or pid:"}},
		{"both names", "sources:\n  usdt:\n    - binary: /x\n      span: a\n      name_arg: 1\n      probe: {provider: p, probe: q}\n      duration_arg: 0\n",
			[]string{"f.yaml:5:17: give span: or name_arg:, not both"}},
		{"half a pair", "sources:\n  usdt:\n    - binary: /x\n      span: a\n      start: {provider: p, probe: q}\n",
			[]string{"f.yaml:3:7: a start/end pair needs both start: and end:"}},
		{"pair and single", "sources:\n  usdt:\n    - binary: /x\n      span: a\n      start: {provider: p, probe: q}\n      end: {provider: p, probe: r}\n      probe: {provider: p, probe: q}\n",
			[]string{"f.yaml:7:14: give start: and end: (a pair) or probe:"}},
		{"bad key", "sources:\n  usdt:\n    - binary: /x\n      span: a\n      start: {provider: p, probe: q}\n      end: {provider: p, probe: r}\n      key: process\n",
			[]string{`f.yaml:7:12: key must be "thread"`}},
		{"arg out of range", "sources:\n  usdt:\n    - binary: /x\n      span: a\n      probe: {provider: p, probe: q}\n      duration_arg: 12\n",
			[]string{"f.yaml:6:21: duration_arg must be between 0 and 11, not 12"}},
		{"arg not int", "sources:\n  usdt:\n    - binary: /x\n      span: a\n      probe: {provider: p, probe: q}\n      duration_arg: one\n",
			[]string{"f.yaml:6:21: duration_arg must be an integer"}},
		{"probe ref missing name", "sources:\n  usdt:\n    - binary: /x\n      span: a\n      probe: {provider: p}\n      duration_arg: 0\n",
			[]string{"f.yaml:5:14: probe needs both provider and probe"}},
		{"long span name", "sources:\n  usdt:\n    - binary: /x\n      span: " + strings.Repeat("x", 128) + "\n      probe: {provider: p, probe: q}\n      duration_arg: 0\n",
			[]string{"f.yaml:4:13: span name is 128 bytes, more than 127"}},
		{"two errors in two sources", "sources:\n  usdt:\n    - binary: /x\n      span: a\n    - pid: 0\n      span: b\n      probe: {provider: p, probe: q}\n      duration_arg: 0\n",
			[]string{"f.yaml:3:7: usdt source needs start: and end:", "f.yaml:5:12: pid must be between 1"}},
		{"bad predicate", "sources:\n  usdt:\n    - binary: /x\n      span: a\n      probe: {provider: p, probe: q}\n      error: arg2 => 500\n",
			[]string{"f.yaml:6:19: error: unknown operator \"=>\": did you mean >=?\n\targ2 => 500\n\t     ^"}},
		{"error and status_arg", "sources:\n  usdt:\n    - binary: /x\n      span: a\n      probe: {provider: p, probe: q}\n      error: arg1 > 2\n      status_arg: 1\n",
			[]string{"f.yaml:7:19: give error: (a predicate) or status_arg: N"}},
		{"bad labels", "sources:\n  usdt:\n    - binary: /x\n      span: a\n      probe: {provider: p, probe: q}\n      labels: {span: arg1, ok: argx}\n",
			[]string{`f.yaml:6:16: label name "span" is taken`, "f.yaml:6:32: label ok: unknown operand argx"}},
		{"cap without labels", "sources:\n  usdt:\n    - binary: /x\n      span: a\n      probe: {provider: p, probe: q}\n      label_cap: 5\n",
			[]string{"f.yaml:6:18: label_cap without labels:"}},
		{"metric and span", "sources:\n  usdt:\n    - binary: /x\n      span: a\n      metric: m\n      probe: {provider: p, probe: q}\n      value_arg: 1\n",
			[]string{"f.yaml:4:13: give span: (spans) or metric: (values), not both"}},
		{"metric without value", "sources:\n  usdt:\n    - binary: /x\n      metric: m\n      probe: {provider: p, probe: q}\n",
			[]string{"f.yaml:4:15: a metric needs value_arg: N"}},
		{"metric pair", "sources:\n  usdt:\n    - binary: /x\n      metric: m\n      start: {provider: p, probe: q}\n      end: {provider: p, probe: r}\n      value_arg: 1\n",
			[]string{"f.yaml:3:7: a metric takes its values at one probe"}},
		{"value without metric", "sources:\n  usdt:\n    - binary: /x\n      span: a\n      probe: {provider: p, probe: q}\n      value_arg: 1\n",
			[]string{"f.yaml:6:18: value_arg is a metric's value"}},
		{"bad metric name", "sources:\n  usdt:\n    - binary: /x\n      metric: 9lives\n      probe: {provider: p, probe: q}\n      value_arg: 1\n",
			[]string{`f.yaml:4:15: metric name "9lives"`}},
		{"metric named by arg", "sources:\n  usdt:\n    - binary: /x\n      metric: m\n      name_arg: 1\n      probe: {provider: p, probe: q}\n      value_arg: 1\n",
			[]string{"f.yaml:5:17: a metric is named by metric:, not name_arg:"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ParseSources("f.yaml", sourcesNode(t, tt.doc))
			if err == nil {
				t.Fatal("no error")
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error\n%v\ndoes not contain\n%s", err, w)
				}
			}
		})
	}
}
