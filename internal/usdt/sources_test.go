package usdt

import (
	"reflect"
	"strings"
	"testing"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/spanwatch/spanwatch/config/section"
	"github.com/spanwatch/spanwatch/internal/srcspec"
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

// TestParseSourcesStrings decodes names from string arguments: a pointer
// and a length, a name built from two (with the default separator and
// another), and a per-source prefix.
func TestParseSourcesStrings(t *testing.T) {
	doc := `
sources:
  usdt:
    - binary: /usr/lib/jvm/libjvm.so
      name_args: [{ptr: 1, len: 2}, {ptr: 3, len: 4}]
      start: {provider: hotspot, probe: method__entry}
      end: {provider: hotspot, probe: method__return}
    - binary: /srv/app
      name_arg: {ptr: 0, len: 1}
      prefix: "app:"
      probe: {provider: app, probe: op}
    - binary: /srv/app
      name_args: [2, {len: 1, ptr: 0}]
      name_separator: ""
      probe: {provider: app, probe: op}
    - binary: /srv/app
      span: fixed
      prefix: "app:"
      probe: {provider: app, probe: op}
`
	got, err := ParseSources("r.yaml", sourcesNode(t, doc))
	if err != nil {
		t.Fatal(err)
	}
	pos := func(line int) section.Pos { return section.Pos{File: "r.yaml", Line: line, Col: 7} }
	want := []SpanSource{
		{
			Binary: "/usr/lib/jvm/libjvm.so", NameArg: -1, NameArgs: []StrArg{{1, 2}, {3, 4}}, NameSeparator: ".",
			Start: ProbeRef{"hotspot", "method__entry"}, End: ProbeRef{"hotspot", "method__return"},
			KeyArg: -1, StatusArg: -1, DurationArg: -1, ValueArg: -1, SilentAfter: DefaultSilentAfter, Pos: pos(4),
		},
		{
			Binary: "/srv/app", NameArg: -1, NameArgs: []StrArg{{0, 1}}, Prefix: "app:", Probe: ProbeRef{"app", "op"},
			KeyArg: -1, StatusArg: -1, DurationArg: -1, ValueArg: -1, SilentAfter: DefaultSilentAfter, Pos: pos(8),
		},
		{
			Binary: "/srv/app", NameArg: -1, NameArgs: []StrArg{{2, -1}, {0, 1}}, Probe: ProbeRef{"app", "op"},
			KeyArg: -1, StatusArg: -1, DurationArg: -1, ValueArg: -1, SilentAfter: DefaultSilentAfter, Pos: pos(12),
		},
		{
			Binary: "/srv/app", Span: "fixed", NameArg: -1, Prefix: "app:", Probe: ProbeRef{"app", "op"},
			KeyArg: -1, StatusArg: -1, DurationArg: -1, ValueArg: -1, SilentAfter: DefaultSilentAfter, Pos: pos(16),
		},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got\n%+v\nwant\n%+v", got, want)
	}
	for i, w := range []struct{ desc, name string }{
		{"arg1[:arg2].arg3[:arg4]", ""},
		{"app:arg0[:arg1]", ""},
		{"arg2arg0[:arg1]", ""},
		{"", "app:fixed"},
	} {
		if d, n := got[i].NameDesc(), got[i].SpanName(); d != w.desc || n != w.name {
			t.Errorf("source %d: NameDesc %q, SpanName %q; want %q, %q", i, d, n, w.desc, w.name)
		}
	}
	if !got[0].Named() || got[3].Named() {
		t.Errorf("Named: %v %v, want true false", got[0].Named(), got[3].Named())
	}
}

// TestParseSourcesStartLabels decodes labels from a pair's start probe:
// each start argument gets an operand after the 12 arguments, once.
func TestParseSourcesStartLabels(t *testing.T) {
	doc := `
sources:
  usdt:
    - binary: /srv/app
      span: req
      start: {provider: app, probe: begin}
      end: {provider: app, probe: end}
      labels: {op: start.arg2, status: arg0, again: start.arg2}
`
	got, err := ParseSources("r.yaml", sourcesNode(t, doc))
	if err != nil {
		t.Fatal(err)
	}
	want := []srcspec.Label{
		{Name: "op", Operand: StartOperand, OperandName: "start.arg2"},
		{Name: "status", Operand: 0, OperandName: "arg0"},
		{Name: "again", Operand: StartOperand, OperandName: "start.arg2"},
	}
	if !reflect.DeepEqual(got[0].Labels.List, want) || !reflect.DeepEqual(got[0].StartArgs, []int{2}) {
		t.Errorf("labels %+v, start args %v; want %+v, [2]", got[0].Labels.List, got[0].StartArgs, want)
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
		{"start label on a single probe", "sources:\n  usdt:\n    - binary: /x\n      span: a\n      probe: {provider: p, probe: q}\n      labels: {op: start.arg1}\n",
			[]string{"f.yaml:6:20: label op: start.arg1 is an argument of a pair's start probe: this source has one probe (use arg1)"}},
		{"bad start label", "sources:\n  usdt:\n    - binary: /x\n      span: a\n      start: {provider: p, probe: q}\n      end: {provider: p, probe: r}\n      labels: {op: start.argv}\n",
			[]string{"f.yaml:7:20: label op: unknown operand start.argv: want start.arg0 to start.arg11"}},
		{"metric named by arg", "sources:\n  usdt:\n    - binary: /x\n      metric: m\n      name_arg: 1\n      probe: {provider: p, probe: q}\n      value_arg: 1\n",
			[]string{"f.yaml:5:17: a metric is named by metric:, not name_arg:"}},
		{"ptr without len", "sources:\n  usdt:\n    - binary: /x\n      probe: {provider: p, probe: q}\n      name_arg: {ptr: 1}\n",
			[]string{"f.yaml:5:17: name_arg needs len: N, the argument holding the string's length"}},
		{"len without ptr", "sources:\n  usdt:\n    - binary: /x\n      probe: {provider: p, probe: q}\n      name_arg: {len: 1}\n",
			[]string{"f.yaml:5:17: name_arg needs ptr: N"}},
		{"ptr is len", "sources:\n  usdt:\n    - binary: /x\n      probe: {provider: p, probe: q}\n      name_arg: {ptr: 1, len: 1}\n",
			[]string{"f.yaml:5:17: name_arg: ptr and len are the same argument (1)"}},
		{"ptr out of range", "sources:\n  usdt:\n    - binary: /x\n      probe: {provider: p, probe: q}\n      name_arg: {ptr: 12, len: 1}\n",
			[]string{"f.yaml:5:23: name_arg.ptr must be between 0 and 11, not 12"}},
		{"unknown str key", "sources:\n  usdt:\n    - binary: /x\n      probe: {provider: p, probe: q}\n      name_arg: {ptr: 1, length: 2}\n",
			[]string{`f.yaml:5:26: name_arg: unknown key "length" (known: ptr, len)`}},
		{"name_args not a list", "sources:\n  usdt:\n    - binary: /x\n      probe: {provider: p, probe: q}\n      name_args: {ptr: 1, len: 2}\n",
			[]string{"f.yaml:5:18: name_args must be a list of string arguments"}},
		{"name_args empty", "sources:\n  usdt:\n    - binary: /x\n      probe: {provider: p, probe: q}\n      name_args: []\n",
			[]string{"f.yaml:5:18: name_args must be a list"}},
		{"name_args element", "sources:\n  usdt:\n    - binary: /x\n      probe: {provider: p, probe: q}\n      name_args: [1, {ptr: 2}, x]\n",
			[]string{"f.yaml:5:22: name_args[1] needs len: N", "f.yaml:5:32: name_args[2] must be an integer"}},
		{"name_args five", "sources:\n  usdt:\n    - binary: /x\n      probe: {provider: p, probe: q}\n      name_args: [0, 1, 2, 3, 4]\n",
			[]string{"f.yaml:5:18: name_args has 5 strings, more than 4"}},
		{"name_arg and name_args", "sources:\n  usdt:\n    - binary: /x\n      probe: {provider: p, probe: q}\n      name_arg: 1\n      name_args: [2, 3]\n",
			[]string{"f.yaml:6:18: give name_arg: (one string) or name_args: (a name built from several), not both"}},
		{"span and name_args", "sources:\n  usdt:\n    - binary: /x\n      probe: {provider: p, probe: q}\n      span: a\n      name_args: [2, 3]\n",
			[]string{"f.yaml:6:18: give span: or name_args:, not both"}},
		{"separator alone", "sources:\n  usdt:\n    - binary: /x\n      probe: {provider: p, probe: q}\n      name_arg: 1\n      name_separator: \"::\"\n",
			[]string{"f.yaml:6:23: name_separator joins the strings of name_args: give name_args: too"}},
		{"separator not a string", "sources:\n  usdt:\n    - binary: /x\n      probe: {provider: p, probe: q}\n      name_args: [1, 2]\n      name_separator: 7\n",
			[]string{"f.yaml:6:23: name_separator must be a string"}},
		{"empty prefix", "sources:\n  usdt:\n    - binary: /x\n      probe: {provider: p, probe: q}\n      span: a\n      prefix: \"\"\n",
			[]string{"f.yaml:6:15: prefix must not be empty"}},
		{"prefix too long for span", "sources:\n  usdt:\n    - binary: /x\n      probe: {provider: p, probe: q}\n      span: xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx\n      prefix: pppppppppppppppppppppppppppppp\n",
			[]string{"f.yaml:5:13: span name is 130 bytes with its prefix (30), more than 127"}},
		{"too many pieces", "sources:\n  usdt:\n    - binary: /x\n      probe: {provider: p, probe: q}\n      name_args: [0, 1, 2, 3]\n      name_separator: sssssssssssssssss\n",
			[]string{"f.yaml:5:18: the name needs 10 pieces"}},
		{"prefix too many pieces", "sources:\n  usdt:\n    - binary: /x\n      probe: {provider: p, probe: q}\n      name_arg: 0\n      prefix: pppppppppppppppppppppppppppppppppppppppppppppppppppppppppppppppppppppppppppppppppppppppppppppppppppppppppppppppppppppppp\n",
			[]string{"f.yaml:6:15: the name needs 9 pieces"}},
		{"metric with prefix", "sources:\n  usdt:\n    - binary: /x\n      probe: {provider: p, probe: q}\n      metric: m\n      value_arg: 1\n      prefix: a\n",
			[]string{"f.yaml:7:15: prefix: is for span names"}},
		{"metric with name_args", "sources:\n  usdt:\n    - binary: /x\n      probe: {provider: p, probe: q}\n      metric: m\n      value_arg: 1\n      name_args: [1]\n",
			[]string{"f.yaml:7:18: a metric is named by metric:, not name_args:"}},
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
