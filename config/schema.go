package config

import (
	_ "embed"
	"encoding/json"
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"
)

//go:embed schema.json
var schemaSource string

// docs/configuration.md, the file's reference, is generated from the
// schemas (this one and those of notify, internal/usdt and
// internal/tpsource); a test fails when it is stale.
//go:generate go run ./internal/refdoc -o ../docs/configuration.md

// Schema returns the JSON Schema (draft-07) of the configuration file:
// schema.json, with the properties of the collector: and listener:
// sections generated from their settings' rows, so that the schema's
// bounds are the decoder's. It checks structure only: Load also checks
// templates, globs, conditions, Rego, the files the configuration names
// and the kernel's limits.
func Schema() []byte {
	s := schemaSource
	s = fillProperties(s, "collector", collectorSettings.schemaProperties())
	s = fillProperties(s, "listener", listenerSettings.schemaProperties())
	return []byte(s)
}

// fillProperties replaces the empty properties of top-level section key
// in schema.json's text with props, one property a line as the file
// writes them.
func fillProperties(text, key, props string) string {
	start := strings.Index(text, "\n    \""+key+"\": {")
	if start < 0 {
		panic("config: schema.json has no section " + key)
	}
	const empty = "\"properties\": {}"
	i := strings.Index(text[start:], empty)
	if i < 0 {
		panic("config: schema.json's " + key + " has no empty properties to fill")
	}
	i += start
	return text[:i] + "\"properties\": {\n" + props + "\n      }" + text[i+len(empty):]
}

// schemaProperties renders the rows as JSON Schema properties, one a line.
func (t *settings[S]) schemaProperties() string {
	lines := make([]string, len(t.rows))
	for i, r := range t.rows {
		lines[i] = fmt.Sprintf("        %q: %s", r.key, r.schema())
	}
	return strings.Join(lines, ",\n")
}

// schema is the row's JSON Schema: its type and bounds, and a description
// from its doc, default and bounds.
func (r *setting[S]) schema() string {
	type kv struct {
		k string
		v any
	}
	var out []kv
	switch r.kind {
	case kindDuration:
		out = append(out, kv{"$ref", "#/definitions/duration"})
	case kindDurationOff:
		out = append(out, kv{"type", "string"})
	case kindInt:
		out = append(out, kv{"type", "integer"})
		if r.min != 0 || r.max != 0 {
			out = append(out, kv{"minimum", r.min}, kv{"maximum", r.max})
		}
	case kindSize:
		out = append(out, kv{"type", []string{"string", "integer"}}, kv{"pattern", "^[0-9]+ *(B|k|K|KiB|M|MiB|G|GiB|kB|KB|MB|GB)?$"},
			kv{"minimum", r.min}, kv{"maximum", r.max})
	case kindBool:
		out = append(out, kv{"type", "boolean"})
	case kindList:
		items := map[string]any{"type": "string", "minLength": 1}
		if len(r.words) > 0 {
			items = map[string]any{"enum": r.words}
		}
		out = append(out, kv{"type", "array"})
		if r.emptyHint != "" {
			out = append(out, kv{"minItems", 1})
		}
		if r.unique {
			out = append(out, kv{"uniqueItems", true})
		}
		out = append(out, kv{"items", items})
	case kindPath:
		out = append(out, kv{"type", "string"}, kv{"minLength", 1})
	}
	out = append(out, kv{"description", r.description()})
	var b strings.Builder
	b.WriteByte('{')
	for i, p := range out {
		if i > 0 {
			b.WriteString(", ")
		}
		v, err := json.Marshal(p.v)
		if err != nil {
			panic(err)
		}
		fmt.Fprintf(&b, "%q: %s", p.k, v)
	}
	b.WriteByte('}')
	return b.String()
}

// description is the row's doc as a sentence, with its default, its
// bounds and whether a reload applies it.
func (r *setting[S]) description() string {
	var b strings.Builder
	b.WriteString(capitalize(r.doc))
	fmt.Fprintf(&b, " (default %s", r.def)
	if s := r.bounds(); s != "" {
		b.WriteString("; " + s)
	}
	b.WriteString(").")
	if r.live {
		b.WriteString(" A reload applies it.")
	} else {
		b.WriteString(" A restart applies it.")
	}
	return b.String()
}

// bounds says the row's bounds in words, "" without.
func (r *setting[S]) bounds() string {
	switch {
	case r.min == 0 && r.max == 0:
		return ""
	case r.max == 0:
		return "at least " + r.format(r.min)
	}
	return r.format(r.min) + " to " + r.format(r.max)
}

func capitalize(s string) string {
	c, n := utf8.DecodeRuneInString(s)
	return string(unicode.ToUpper(c)) + s[n:]
}
