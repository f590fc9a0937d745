package agent

import (
	"context"
	"encoding/json"
	"os"
	"testing"

	"github.com/open-policy-agent/opa/v1/rego"
	"gopkg.in/yaml.v3"

	"github.com/spanwatch/spanwatch/policy"
)

// TestSchema checks that the configuration file's JSON Schema (spanwatch
// check --schema, for editors) accepts a file with every section the agent
// reads and refuses the structural mistakes of the collector: and
// external_url: sections that Load refuses, using OPA's draft-07
// validator.
func TestSchema(t *testing.T) {
	var schema any
	if err := json.Unmarshal(policy.Schema(), &schema); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		file string
		ok   bool
	}{
		{"testdata/good/full.yaml", true},
		{"testdata/good/minimal.yaml", true},
		{"testdata/broken/collector_unknown_key.yaml", false},
		{"testdata/broken/collector_not_mapping.yaml", false},
		{"testdata/broken/collector_max_series_absurd.yaml", false},
		{"testdata/broken/collector_max_series_zero.yaml", false},
		{"testdata/broken/collector_ringbuf_huge.yaml", false},
		{"testdata/broken/collector_sources_unknown.yaml", false},
		{"testdata/broken/collector_sources_twice.yaml", false},
		{"testdata/broken/collector_force_kprobe_string.yaml", false},
		{"testdata/broken/external_url_relative.yaml", false},
		{"testdata/broken/external_url_list.yaml", false},
	} {
		raw, err := os.ReadFile(tc.file)
		if err != nil {
			t.Fatal(err)
		}
		var doc any
		if err := yaml.Unmarshal(raw, &doc); err != nil {
			t.Fatal(err)
		}
		rs, err := rego.New(
			rego.Query("[ok, errs] := json.match_schema(input.doc, input.schema)"),
			rego.Input(map[string]any{"doc": doc, "schema": schema}),
		).Eval(context.Background())
		if err != nil || len(rs) != 1 {
			t.Fatalf("%s: %v", tc.file, err)
		}
		if ok := rs[0].Bindings["ok"].(bool); ok != tc.ok {
			t.Errorf("%s: schema says ok=%v, want %v (%v)", tc.file, ok, tc.ok, rs[0].Bindings["errs"])
		}
	}
}
