package policy

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
	for _, f := range []string{"testdata/good/full.yaml", "../examples/rego/spanwatch.yaml"} {
		if errs := matchSchema(t, Schema(), f); len(errs) > 0 {
			t.Errorf("%s: schema rejects a valid file: %v", f, errs)
		}
	}
}

// TestSchemaRejectsBadFiles checks the schema catches the structural
// mistakes Parse catches (it cannot check templates, Rego or files).
func TestSchemaRejectsBadFiles(t *testing.T) {
	for _, f := range []string{
		"unknown_top_key", "unknown_rule_key", "wrong_types", "when_and_anomaly", "bad_label_name",
		"bad_duration", "bad_anomaly", "empty_name", "budget_errors", "not_a_mapping", "bad_operator",
		"bad_over", "bad_external_labels",
	} {
		if errs := matchSchema(t, Schema(), "testdata/bad/"+f+".yaml"); len(errs) == 0 {
			t.Errorf("%s: schema accepts it", f)
		}
	}
}
