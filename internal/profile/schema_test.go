package profile

import (
	"bytes"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/spanwatch/spanwatch/snapshot"
)

func TestReportSchema(t *testing.T) {
	c := jsonschema.NewCompiler()
	for url, b := range map[string][]byte{
		"https://spanwatch.dev/schema/snapshot.json": snapshot.Schema,
		"https://spanwatch.dev/schema/stacks.json":   ReportSchema,
	} {
		doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(b))
		if err != nil {
			t.Fatal(err)
		}
		if err := c.AddResource(url, doc); err != nil {
			t.Fatal(err)
		}
	}
	schema, err := c.Compile("https://spanwatch.dev/schema/stacks.json")
	if err != nil {
		t.Fatal(err)
	}
	overruns := fixture()
	overruns[0].UserStack[1].Inlined = true
	for name, tc := range map[string]struct {
		span   string
		stacks []Stack
		ok     bool
	}{
		"all":   {"", Aggregate(overruns), true},
		"empty": {"nothing", nil, true},
		"bad":   {"x", []Stack{{Span: "x", Count: 0}}, false},
	} {
		var b bytes.Buffer
		if err := WriteJSON(&b, tc.span, overruns, tc.stacks); err != nil {
			t.Fatal(err)
		}
		v, err := jsonschema.UnmarshalJSON(&b)
		if err != nil {
			t.Fatal(err)
		}
		if err := schema.Validate(v); (err == nil) != tc.ok {
			t.Errorf("%s: validation error %v, want ok %v", name, err, tc.ok)
		}
	}
}
