package usdt

import (
	"reflect"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"
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
`
	got, err := ParseSources("/etc/spanwatch/rules.yaml", sourcesNode(t, doc))
	if err != nil {
		t.Fatal(err)
	}
	want := []SpanSource{
		{
			Binary: "/usr/sbin/mysqld", Span: "query", NameArg: -1,
			Start: ProbeRef{"mysql", "query__start"}, End: ProbeRef{"mysql", "query__done"},
			KeyArg: -1, StatusArg: 2, DurationArg: -1, Pos: "/etc/spanwatch/rules.yaml:5:7",
		},
		{
			Binary: "/etc/spanwatch/app", Span: "request", NameArg: -1,
			Probe: ProbeRef{"app", "request_done"}, KeyArg: -1, StatusArg: -1, DurationArg: 1,
			Pos: "/etc/spanwatch/rules.yaml:11:7",
		},
		{
			PID: 4242, NameArg: 1, Start: ProbeRef{"app", "begin"}, End: ProbeRef{"app", "end"},
			KeyArg: 0, StatusArg: -1, DurationArg: -1, Pos: "/etc/spanwatch/rules.yaml:15:7",
		},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got\n%+v\nwant\n%+v", got, want)
	}
	if !got[0].Paired() || got[1].Paired() {
		t.Errorf("Paired: %v %v", got[0].Paired(), got[1].Paired())
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
		{"no target", "sources:\n  usdt:\n    - span: a\n      probe: {provider: p, probe: q}\n      duration_arg: 0\n",
			[]string{"f.yaml:3:7: usdt source needs binary: (every process running it) or pid:"}},
		{"both names", "sources:\n  usdt:\n    - binary: /x\n      span: a\n      name_arg: 1\n      probe: {provider: p, probe: q}\n      duration_arg: 0\n",
			[]string{"f.yaml:5:17: give span: or name_arg:, not both"}},
		{"half a pair", "sources:\n  usdt:\n    - binary: /x\n      span: a\n      start: {provider: p, probe: q}\n",
			[]string{"f.yaml:3:7: a start/end pair needs both start: and end:"}},
		{"single without duration", "sources:\n  usdt:\n    - binary: /x\n      span: a\n      probe: {provider: p, probe: q}\n",
			[]string{"f.yaml:5:14: a single probe: needs duration_arg: N"}},
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
		{"long span name", "sources:\n  usdt:\n    - binary: /x\n      span: " + strings.Repeat("x", 64) + "\n      probe: {provider: p, probe: q}\n      duration_arg: 0\n",
			[]string{"f.yaml:4:13: span name is 64 bytes, more than 63"}},
		{"two errors in two sources", "sources:\n  usdt:\n    - binary: /x\n      span: a\n    - pid: 0\n      span: b\n      probe: {provider: p, probe: q}\n      duration_arg: 0\n",
			[]string{"f.yaml:3:7: usdt source needs start: and end:", "f.yaml:5:12: pid must be between 1"}},
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
