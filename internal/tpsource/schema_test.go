package tpsource

import (
	"bytes"
	"encoding/json"
	"os"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"gopkg.in/yaml.v3"
)

// TestSourcesSchema checks that sources.schema.json accepts and rejects
// what ParseSources does.
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
	good := []string{
		"sources:\n  user_events:\n    - {event: a, span: s, duration_field: d, status_field: st}\n",
		"sources:\n  user_events:\n    - {start: a, end: b, name_field: n, key_field: k}\n",
		"sources:\n  user_events:\n    - {start: a, end: b, span: s, key: thread}\n",
		"sources:\n  eventheader:\n    - {provider: opentelemetry_traces}\n",
		"sources:\n  eventheader:\n    - {provider: p, level: 4, keyword: 1}\n",
		"sources:\n  eventheader:\n    - {provider: p, event: e, name_field: PartB.n, duration_field: [PartC, d.ns]}\n",
		"sources:\n  eventheader:\n    - {provider: p, start: a, end: b, span: s, key_field: PartB.id}\n",
		"sources:\n  user_events: []\n  eventheader: []\n",
		"sources:\n  user_events:\n    - {event: a, metric: m, value_field: v, status_field: e}\n",
		"sources:\n  eventheader:\n    - {provider: p, event: e, metric: m, value_field: PartC.v}\n",
		"sources:\n  user_events:\n    - {event: a, span: s, duration_field: d, error: \"st >= 500\", labels: {code: st}, label_cap: 10}\n",
	}
	bad := []string{
		"sources:\n  user_events:\n    - {event: a, span: s}\n",
		"sources:\n  user_events:\n    - {event: a, duration_field: d}\n",
		"sources:\n  user_events:\n    - {event: a, span: s, name_field: n, duration_field: d}\n",
		"sources:\n  user_events:\n    - {start: a, span: s}\n",
		"sources:\n  user_events:\n    - {start: a, end: b, span: s, duration_field: d}\n",
		"sources:\n  user_events:\n    - {start: a, end: b, span: s, key: thread, key_field: k}\n",
		"sources:\n  user_events:\n    - {event: a-b, span: s, duration_field: d}\n",
		"sources:\n  user_events:\n    - {event: a, span: s, duration_field: d, colour: red}\n",
		"sources:\n  eventheader:\n    - {level: 4}\n",
		"sources:\n  eventheader:\n    - {provider: p, span: s}\n",
		"sources:\n  eventheader:\n    - {provider: p, event: e, span: s}\n",
		"sources:\n  eventheader:\n    - {provider: p, level: 256}\n",
		"sources:\n  user_events:\n    - {event: a, metric: m}\n",
		"sources:\n  user_events:\n    - {event: a, metric: m, value_field: v, span: s}\n",
		"sources:\n  eventheader:\n    - {provider: p, metric: m, value_field: v}\n",
		"sources:\n  eventheader:\n    - {provider: p, labels: {a: PartB.b}}\n",
	}
	check := func(d string, wantOK bool) {
		t.Helper()
		_, perr := ParseSources("f.yaml", sourcesNode(t, d))
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
	for _, d := range good {
		check(d, true)
	}
	for _, d := range bad {
		check(d, false)
	}
}
