package config

import (
	"context"
	"encoding/json"
	"os"
	"regexp"
	"strings"
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
	for _, f := range []string{"../policy/testdata/good/full.yaml", "../examples/rego/spanwatch.yaml", "testdata/good/every_mapping.yaml"} {
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

// jsonDoc is a parsed JSON Schema document, for resolving $refs in it.
type jsonDoc struct {
	root map[string]any
	file string
}

func readSchema(t *testing.T, file string, data []byte) jsonDoc {
	t.Helper()
	if data == nil {
		var err error
		if data, err = os.ReadFile(file); err != nil {
			t.Fatal(err)
		}
	}
	var root map[string]any
	if err := json.Unmarshal(data, &root); err != nil {
		t.Fatalf("%s: %v", file, err)
	}
	return jsonDoc{root, file}
}

// resolve follows n's $ref ("#/definitions/x", "#/$defs/x").
func (d jsonDoc) resolve(n map[string]any) map[string]any {
	for i := 0; i < 8; i++ {
		ref, _ := n["$ref"].(string)
		if ref == "" {
			return n
		}
		var cur any = d.root
		for _, part := range strings.Split(strings.TrimPrefix(ref, "#/"), "/") {
			m, _ := cur.(map[string]any)
			cur = m[part]
		}
		n, _ = cur.(map[string]any)
	}
	return n
}

// properties are the keys n declares, in itself and its branches, and
// whether it closes its keys (additionalProperties: false).
func (d jsonDoc) properties(n map[string]any) (map[string]map[string]any, bool) {
	out := map[string]map[string]any{}
	closed := false
	var walk func(n map[string]any, depth int)
	walk = func(n map[string]any, depth int) {
		n = d.resolve(n)
		if n == nil || depth > 8 {
			return
		}
		if a, ok := n["additionalProperties"].(bool); ok && !a {
			closed = true
		}
		if p, ok := n["properties"].(map[string]any); ok {
			for k, v := range p {
				if m, ok := v.(map[string]any); ok {
					out[k] = m
				}
			}
		}
		for _, c := range []string{"allOf", "oneOf", "anyOf"} {
			list, _ := n[c].([]any)
			for _, b := range list {
				if m, ok := b.(map[string]any); ok {
					walk(m, depth+1)
				}
			}
		}
	}
	walk(n, 0)
	return out, closed
}

// items is the schema of a list's items (in n or a branch of it).
func (d jsonDoc) items(n map[string]any) map[string]any {
	n = d.resolve(n)
	if it, ok := n["items"].(map[string]any); ok {
		return it
	}
	for _, c := range []string{"allOf", "oneOf", "anyOf"} {
		list, _ := n[c].([]any)
		for _, b := range list {
			if m, ok := b.(map[string]any); ok {
				if it := d.items(m); it != nil {
					return it
				}
			}
		}
	}
	return nil
}

// A schemaAt is a node of one of the schemas.
type schemaAt struct {
	doc  jsonDoc
	node map[string]any
}

// knownKeysRE finds the keys a decoder lists when it refuses an unknown
// one: config/section's "(want one of: ...)", notify's "(known keys:
// ...)", the settings' and sources' "(known: ...)".
var knownKeysRE = regexp.MustCompile(`unknown key "zz_probe" (?:from merge )?\((?:want one of|known keys|known): ([^)]*)\)`)

// TestSchemaHasEveryDecodedKey checks, for a mapping of every kind the
// file has (testdata/good/every_mapping.yaml), that the keys its decoder
// accepts are the keys its JSON Schema declares: it adds an unknown key to
// each mapping in turn and reads the keys the decoder lists in its error.
// The schemas are config.Schema() with, for the sections other packages
// decode, notify/schema.json and the sources schemas of internal/usdt and
// internal/tpsource; docs/configuration.md is generated from them.
func TestSchemaHasEveryDecodedKey(t *testing.T) {
	cfgDoc := readSchema(t, "schema.json", Schema())
	notifyDoc := readSchema(t, "../notify/schema.json", nil)
	usdtDoc := readSchema(t, "../internal/usdt/sources.schema.json", nil)
	tpDoc := readSchema(t, "../internal/tpsource/sources.schema.json", nil)
	// child is the schema of key k of a mapping whose schema is s.
	child := func(path string, s schemaAt, k string) (schemaAt, bool) {
		switch path {
		case "":
			switch k {
			case "webhooks", "routing":
				return schemaAt{notifyDoc, notifyDoc.root["properties"].(map[string]any)[k].(map[string]any)}, true
			case "sources":
				return schemaAt{usdtDoc, usdtDoc.root}, true
			}
		case "sources":
			if k == "user_events" || k == "eventheader" {
				return schemaAt{tpDoc, tpDoc.root["properties"].(map[string]any)[k].(map[string]any)}, true
			}
		}
		props, _ := s.doc.properties(s.node)
		n, ok := props[k]
		return schemaAt{s.doc, n}, ok
	}
	const file = "testdata/good/every_mapping.yaml"
	raw, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Parse(file, raw, LoadOptions{}); err != nil {
		t.Fatalf("%s does not load: %v", file, err)
	}
	var root yaml.Node
	if err := yaml.Unmarshal(raw, &root); err != nil {
		t.Fatal(err)
	}
	probed := map[string]bool{}
	var walk func(n *yaml.Node, path string, s schemaAt)
	walk = func(n *yaml.Node, path string, s schemaAt) {
		switch n.Kind {
		case yaml.SequenceNode:
			it := s.doc.items(s.node)
			for _, c := range n.Content {
				if it != nil {
					walk(c, path+"[]", schemaAt{s.doc, it})
				}
			}
			return
		case yaml.MappingNode:
		default:
			return
		}
		declared, closed := s.doc.properties(s.node)
		// Add the probe, decode, and take it out again.
		k := &yaml.Node{Kind: yaml.ScalarNode, Value: "zz_probe"}
		v := &yaml.Node{Kind: yaml.ScalarNode, Value: "1"}
		n.Content = append(n.Content, k, v)
		out, err := yaml.Marshal(&root)
		n.Content = n.Content[:len(n.Content)-2]
		if err != nil {
			t.Fatal(err)
		}
		_, perr := Parse(file, out, LoadOptions{})
		var m []string
		if perr != nil {
			m = knownKeysRE.FindStringSubmatch(perr.Error())
		}
		where := path
		if where == "" {
			where = "the top level"
		}
		switch {
		case m == nil && closed:
			t.Errorf("%s: the schema (%s) closes its keys, but the decoder takes an unknown key (%v)", where, s.doc.file, perr)
		case m == nil:
			// A map of names (labels, match:): any key, and the schema says so.
		default:
			probed[path] = true
			if !closed {
				t.Errorf("%s: the decoder refuses unknown keys, the schema (%s) does not", where, s.doc.file)
			}
			decoded := map[string]bool{}
			for _, key := range strings.Split(m[1], ", ") {
				decoded[key] = true
				if _, ok := declared[key]; !ok {
					t.Errorf("%s: key %s is decoded but not in the schema (%s)", where, key, s.doc.file)
				}
			}
			for key := range declared {
				if !decoded[key] {
					t.Errorf("%s: key %s is in the schema (%s) but the decoder refuses it", where, key, s.doc.file)
				}
			}
		}
		for i := 0; i+1 < len(n.Content); i += 2 {
			key := n.Content[i].Value
			if c, ok := child(path, s, key); ok {
				p := key
				if path != "" {
					p = path + "." + key
				}
				walk(n.Content[i+1], p, c)
			}
		}
	}
	walk(root.Content[0], "", schemaAt{cfgDoc, cfgDoc.root})
	for _, p := range []string{
		"", "budgets[]", "rules[]", "rules[].anomaly", "policies[]", "webhooks[]", "webhooks[].basic_auth", "webhooks[].tls",
		"routing", "routing.outbox", "sources", "sources.usdt[]", "sources.usdt[].start", "sources.user_events[]",
		"sources.eventheader[]", "collector", "metrics", "policy_limits", "listener",
	} {
		if !probed[p] {
			t.Errorf("%s: not probed (add a mapping there to %s)", p, file)
		}
	}
}
