package usdt

import (
	"bytes"
	"encoding/json"
	"os"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"gopkg.in/yaml.v3"
)

// TestSourcesSchema checks that sources.schema.json accepts and rejects
// what ParseSources does, over the documents of the decoder's tests.
func TestSourcesSchema(t *testing.T) {
	raw, err := os.ReadFile("sources.schema.json")
	if err != nil {
		t.Fatal(err)
	}
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(raw))
	if err != nil {
		t.Fatal(err)
	}
	c := jsonschema.NewCompiler()
	if err := c.AddResource("sources.schema.json", doc); err != nil {
		t.Fatal(err)
	}
	sch, err := c.Compile("sources.schema.json")
	if err != nil {
		t.Fatal(err)
	}
	docs := []string{
		"sources:\n  usdt:\n    - binary: /x\n      span: a\n      start: {provider: p, probe: q}\n      end: {provider: p, probe: r}\n      key: thread\n      status_arg: 2\n",
		"sources:\n  usdt:\n    - pid: 7\n      name_arg: 1\n      start: {provider: p, probe: q}\n      end: {provider: p, probe: r}\n      key_arg: 0\n",
		"sources:\n  usdt:\n    - binary: ./app\n      span: a\n      probe: {provider: p, probe: q}\n      duration_arg: 1\n",
		"sources:\n  usdt: []\n",
		"sources:\n  usdt:\n    - binary: /x\n      span: a\n      probe: {provider: p, probe: q}\n",
		"sources:\n  usdt:\n    - binary: /x\n      name_arg: 0\n      start: {provider: p, probe: q}\n      end: {provider: p, probe: r}\n      error: \"arg0 >= 500\"\n      labels: {status: arg0}\n      label_cap: 10\n",
		"sources:\n  usdt:\n    - binary: /x\n      metric: queue.depth\n      probe: {provider: p, probe: q}\n      value_arg: 0\n      error: arg0 < 0\n",
		"sources:\n  usdt:\n    - binary: /x\n      span: a\n      probe: {provider: p, probe: q}\n      silent_after: 90s\n",
		"sources:\n  usdt:\n    - binary: /x\n      span: a\n      probe: {provider: p, probe: q}\n      silent_after: 0\n",
		"sources:\n  usdt:\n    - binary: /x\n      name_args: [{ptr: 1, len: 2}, {ptr: 3, len: 4}]\n      start: {provider: p, probe: q}\n      end: {provider: p, probe: r}\n",
		"sources:\n  usdt:\n    - binary: /x\n      name_arg: {ptr: 0, len: 1}\n      prefix: \"app:\"\n      probe: {provider: p, probe: q}\n",
		"sources:\n  usdt:\n    - binary: /x\n      name_args: [2, {ptr: 0, len: 1}]\n      name_separator: \"\"\n      probe: {provider: p, probe: q}\n",
		"sources:\n  usdt:\n    - binary: /x\n      span: a\n      prefix: \"app:\"\n      probe: {provider: p, probe: q}\n",
		"sources:\n  usdt:\n    - binary: /x\n      span: a\n      start: {provider: p, probe: q}\n      end: {provider: p, probe: r}\n      labels: {op: start.arg1, status: arg0}\n",
	}
	bad := []string{
		"sources:\n  uprobes: []\n",
		"sources:\n  usdt:\n    - span: a\n      probe: {provider: p, probe: q}\n      duration_arg: 0\n",
		"sources:\n  usdt:\n    - binary: /x\n      span: a\n      name_arg: 1\n      probe: {provider: p, probe: q}\n      duration_arg: 0\n",
		"sources:\n  usdt:\n    - binary: /x\n      span: a\n      start: {provider: p, probe: q}\n",
		"sources:\n  usdt:\n    - binary: /x\n      span: a\n      start: {provider: p, probe: q}\n      end: {provider: p, probe: r}\n      key: process\n",
		"sources:\n  usdt:\n    - binary: /x\n      span: a\n      probe: {provider: p, probe: q}\n      duration_arg: 12\n",
		"sources:\n  usdt:\n    - binary: /x\n      span: a\n      start: {provider: p, probe: q}\n      end: {provider: p, probe: r}\n      key: thread\n      key_arg: 1\n",
		"sources:\n  usdt:\n    - binary: /x\n      span: a\n      probe: {provider: p, probe: q}\n      duration_arg: 0\n      colour: red\n",
		"sources:\n  usdt:\n    - binary: /x\n      span: a\n      metric: m\n      probe: {provider: p, probe: q}\n      value_arg: 0\n",
		"sources:\n  usdt:\n    - binary: /x\n      metric: m\n      probe: {provider: p, probe: q}\n",
		"sources:\n  usdt:\n    - binary: /x\n      span: a\n      probe: {provider: p, probe: q}\n      value_arg: 0\n",
		"sources:\n  usdt:\n    - binary: /x\n      metric: m\n      start: {provider: p, probe: q}\n      end: {provider: p, probe: r}\n      value_arg: 0\n",
		"sources:\n  usdt:\n    - binary: /x\n      span: a\n      probe: {provider: p, probe: q}\n      labels: {span: arg1}\n",
		"sources:\n  usdt:\n    - binary: /x\n      span: a\n      probe: {provider: p, probe: q}\n      labels: {s: arg12}\n",
		"sources:\n  usdt:\n    - binary: /x\n      span: a\n      probe: {provider: p, probe: q}\n      label_cap: 3\n",
		"sources:\n  usdt:\n    - binary: /x\n      span: a\n      probe: {provider: p, probe: q}\n      error: arg1 > 1\n      status_arg: 1\n",
		"sources:\n  usdt:\n    - binary: /x\n      span: a\n      probe: {provider: p, probe: q}\n      silent_after: 600\n",
		"sources:\n  usdt:\n    - binary: /x\n      span: a\n      probe: {provider: p, probe: q}\n      silent_after: -1m\n",
		"sources:\n  usdt:\n    - binary: /x\n      name_arg: {ptr: 1}\n      probe: {provider: p, probe: q}\n",
		"sources:\n  usdt:\n    - binary: /x\n      name_arg: {ptr: 1, len: 2, size: 3}\n      probe: {provider: p, probe: q}\n",
		"sources:\n  usdt:\n    - binary: /x\n      name_args: []\n      probe: {provider: p, probe: q}\n",
		"sources:\n  usdt:\n    - binary: /x\n      name_args: [0, 1, 2, 3, 4]\n      probe: {provider: p, probe: q}\n",
		"sources:\n  usdt:\n    - binary: /x\n      name_arg: 1\n      name_args: [2]\n      probe: {provider: p, probe: q}\n",
		"sources:\n  usdt:\n    - binary: /x\n      name_arg: 1\n      name_separator: \".\"\n      probe: {provider: p, probe: q}\n",
		"sources:\n  usdt:\n    - binary: /x\n      metric: m\n      prefix: a\n      probe: {provider: p, probe: q}\n      value_arg: 0\n",
		"sources:\n  usdt:\n    - binary: /x\n      span: a\n      prefix: \"\"\n      probe: {provider: p, probe: q}\n",
		"sources:\n  usdt:\n    - binary: /x\n      span: a\n      start: {provider: p, probe: q}\n      end: {provider: p, probe: r}\n      labels: {op: start.arg12}\n",
		"sources:\n  usdt:\n    - binary: /x\n      span: a\n      start: {provider: p, probe: q}\n      end: {provider: p, probe: r}\n      labels: {kind: begin.arg1}\n",
	}
	check := func(d string, wantOK bool) {
		t.Helper()
		node := sourcesNode(t, d)
		_, perr := ParseSources("f.yaml", node)
		var v map[string]any
		if err := yaml.Unmarshal([]byte(d), &v); err != nil {
			t.Fatal(err)
		}
		js, _ := json.Marshal(v["sources"])
		inst, err := jsonschema.UnmarshalJSON(bytes.NewReader(js))
		if err != nil {
			t.Fatal(err)
		}
		serr := sch.Validate(inst)
		if (perr == nil) != wantOK || (serr == nil) != wantOK {
			t.Errorf("%q: ParseSources error %v, schema error %v; want valid=%v for both", d, perr, serr, wantOK)
		}
	}
	for _, d := range docs {
		check(d, true)
	}
	for _, d := range bad {
		check(d, false)
	}
}
