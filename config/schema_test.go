package config

import (
	"context"
	"encoding/json"
	"os"
	"testing"

	"github.com/open-policy-agent/opa/v1/rego"
	"gopkg.in/yaml.v3"
)

// matchSchema validates a YAML file against a JSON Schema with OPA's
// json.match_schema builtin (a real draft-07 validator already in the
// build), returning the validator's errors.
func matchSchema(t *testing.T, schema []byte, yamlFile string) []any {
	t.Helper()
	raw, err := os.ReadFile(yamlFile)
	if err != nil {
		t.Fatal(err)
	}
	var doc any
	if err := yaml.Unmarshal(raw, &doc); err != nil {
		t.Fatal(err)
	}
	var sch any
	if err := json.Unmarshal(schema, &sch); err != nil {
		t.Fatalf("schema is not JSON: %v", err)
	}
	rs, err := rego.New(
		rego.Query("[ok, errs] := json.match_schema(input.doc, input.schema)"),
		rego.Input(map[string]any{"doc": doc, "schema": sch}),
	).Eval(context.Background())
	if err != nil {
		t.Fatalf("%s: %v", yamlFile, err)
	}
	if len(rs) != 1 {
		t.Fatalf("%s: no result", yamlFile)
	}
	errs, _ := rs[0].Bindings["errs"].([]any)
	if ok := rs[0].Bindings["ok"].(bool); ok != (len(errs) == 0) {
		t.Fatalf("%s: ok=%v with %d errors", yamlFile, ok, len(errs))
	}
	return errs
}

func TestSchemaAcceptsGoodFiles(t *testing.T) {
	for _, f := range []string{"../policy/testdata/good/full.yaml", "../examples/rego/spanwatch.yaml"} {
		if errs := matchSchema(t, Schema(), f); len(errs) > 0 {
			t.Errorf("%s: schema rejects a valid file: %v", f, errs)
		}
	}
}

// TestSchemaRejectsBadFiles checks the schema catches the structural
// mistakes Load catches (it cannot check templates, Rego or files).
func TestSchemaRejectsBadFiles(t *testing.T) {
	for _, f := range []string{
		"unknown_top_key", "unknown_rule_key", "wrong_types", "when_and_anomaly", "bad_label_name",
		"bad_duration", "bad_anomaly", "empty_name", "budget_errors", "not_a_mapping", "bad_operator",
		"bad_over", "bad_external_labels",
	} {
		path := "../policy/testdata/bad/" + f + ".yaml"
		if f == "unknown_top_key" {
			path = "testdata/broken/" + f + ".yaml"
		}
		if errs := matchSchema(t, Schema(), path); len(errs) == 0 {
			t.Errorf("%s: schema accepts it", f)
		}
	}
}

// TestSchema checks that the configuration file's JSON Schema (spanwatch
// check --schema, for editors) accepts a file with every section the agent
// reads and refuses the structural mistakes of the collector: and
// external_url: sections that Load refuses, using OPA's draft-07
// validator.
func TestSchema(t *testing.T) {
	var schema any
	if err := json.Unmarshal(Schema(), &schema); err != nil {
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
