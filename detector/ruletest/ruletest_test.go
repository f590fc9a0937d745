package ruletest

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/open-policy-agent/opa/v1/rego"
	"gopkg.in/yaml.v3"
)

func TestRunFilePasses(t *testing.T) {
	for _, f := range []string{"../../policy/testdata/good/full.test.yaml", "../../examples/rego/spanwatch.test.yaml", "testdata/range.test.yaml"} {
		results, err := RunFile(context.Background(), f)
		if err != nil {
			t.Fatal(err)
		}
		if len(results) < 2 && f != "testdata/range.test.yaml" {
			t.Errorf("%s: %d test cases", f, len(results))
		}
		for _, r := range results {
			if !r.Passed() {
				t.Errorf("%s: %s failed:\n%s", f, r.Name, strings.Join(r.Failures, "\n"))
			}
		}
	}
}

func TestRunFileReportsDiffs(t *testing.T) {
	results, err := RunFile(context.Background(), "testdata/failing.test.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if len(results) != 3 || results[0].Passed() || !results[1].Passed() || !results[2].Passed() {
		t.Fatalf("results = %+v", results)
	}
	want := []string{
		`at 0s (step 0): alert {alertname="Slow", span="checkout"}: state pending, want firing`,
		`at 10s (step 1): missing pending alert {alertname="Slow", container="web-1", span="checkout"}; the pending alert {alertname="Slow", span="checkout"} differs in container missing, want "web-1"`,
		`at 20s (step 2): alert {alertname="Slow", span="checkout"}: annotation runbook missing, want "x"`,
		"at 20s (step 2): alert {alertname=\"Slow\", span=\"checkout\"}: annotation summary:\n      got  \"p99 300ms\"\n      want \"p99 250ms\"",
		`at 20s (step 2): missing firing alert {alertname="Other"}`,
	}
	got := results[0].Failures
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("failures:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

func TestRunFileErrors(t *testing.T) {
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "rules.yaml"), []byte("rules: []\n"), 0o644)
	os.WriteFile(filepath.Join(dir, "bad_rules.yaml"), []byte("rules:\n  - name: X\n    when: p99 >\n"), 0o644)
	for _, tc := range []struct {
		name, src, want string
	}{
		{"unknown key", "rule_file: rules.yaml\ntests:\n  - name: x\n    stepz: []\n", "field stepz not found"},
		{"no rule file", "tests: []\n", "rule_file is missing"},
		{"bad rule file", "rule_file: bad_rules.yaml\ntests:\n  - steps: [{series: []}]\n", "bad_rules.yaml:3:16: when: missing value after p99 >"},
		{"no steps", "rule_file: rules.yaml\ntests:\n  - name: x\n", "no steps"},
		{"at between steps", "rule_file: rules.yaml\ntests:\n  - steps: [{series: []}]\n    expect: [{at: 5s, alerts: []}]\n", "no step is evaluated then"},
		{"step out of range", "rule_file: rules.yaml\ntests:\n  - steps: [{series: []}]\n    expect: [{step: 3, alerts: []}]\n", "steps 0 to 0"},
		{"bad duration", "rule_file: rules.yaml\ntests:\n  - steps: [{series: [{span: a, p99: fast}]}]\n", `p99 "fast"`},
		{"missing file", "rule_file: rules.yaml\ntests:\n  - steps: [{file: nope.json}]\n", "nope.json"},
		{"latencies and quantiles", "rule_file: rules.yaml\ntests:\n  - steps: [{series: [{span: a, p99: 1s, latencies: {10ms: 3}}]}]\n", "latencies and p50, p90, p99, max or mean are exclusive"},
		{"latencies and count", "rule_file: rules.yaml\ntests:\n  - steps: [{series: [{span: a, count: 5, latencies: {10ms: 3, 1s: 1}}]}]\n", "count 5, but the latencies add up to 4 spans"},
		{"bad latency", "rule_file: rules.yaml\ntests:\n  - steps: [{series: [{span: a, latencies: {fast: 3}}]}]\n", `latency "fast"`},
	} {
		p := filepath.Join(dir, "t.yaml")
		os.WriteFile(p, []byte(tc.src), 0o644)
		_, err := RunFile(context.Background(), p)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: err = %v, want %q", tc.name, err, tc.want)
		}
	}
}

// TestSchema validates test files against the schema with OPA's
// json.match_schema (a draft-07 validator already in the build).
func TestSchema(t *testing.T) {
	var sch any
	if err := json.Unmarshal(Schema(), &sch); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		file  string
		valid bool
	}{
		{"../../policy/testdata/good/full.test.yaml", true},
		{"../../examples/rego/spanwatch.test.yaml", true},
		{"testdata/failing.test.yaml", true},
		{"testdata/range.test.yaml", true},
		{"testdata/invalid.test.yaml", false},
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
			rego.Input(map[string]any{"doc": doc, "schema": sch}),
		).Eval(context.Background())
		if err != nil || len(rs) != 1 {
			t.Fatalf("%s: %v", tc.file, err)
		}
		if ok := rs[0].Bindings["ok"].(bool); ok != tc.valid {
			t.Errorf("%s: valid=%v, want %v (errors %v)", tc.file, ok, tc.valid, rs[0].Bindings["errs"])
		}
	}
}
