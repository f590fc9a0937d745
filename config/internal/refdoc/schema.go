package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"regexp"
	"strings"
)

// An object is a JSON object with its keys in the file's order, which is
// the order the page lists them in.
type object struct {
	keys []string
	m    map[string]any
}

func (o *object) get(k string) any {
	if o == nil {
		return nil
	}
	return o.m[k]
}

func (o *object) obj(k string) *object {
	v, _ := o.get(k).(*object)
	return v
}

func (o *object) str(k string) string {
	v, _ := o.get(k).(string)
	return v
}

// parseJSON decodes JSON keeping the order of object keys.
func parseJSON(data []byte) (any, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	v, err := parseValue(dec)
	if err != nil {
		return nil, err
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, fmt.Errorf("data after the top-level value")
	}
	return v, nil
}

func parseValue(dec *json.Decoder) (any, error) {
	tok, err := dec.Token()
	if err != nil {
		return nil, err
	}
	switch t := tok.(type) {
	case json.Delim:
		switch t {
		case '{':
			o := &object{m: map[string]any{}}
			for dec.More() {
				kt, err := dec.Token()
				if err != nil {
					return nil, err
				}
				k := kt.(string)
				v, err := parseValue(dec)
				if err != nil {
					return nil, err
				}
				if _, dup := o.m[k]; dup {
					return nil, fmt.Errorf("key %q twice", k)
				}
				o.keys = append(o.keys, k)
				o.m[k] = v
			}
			_, err := dec.Token()
			return o, err
		case '[':
			var a []any
			for dec.More() {
				v, err := parseValue(dec)
				if err != nil {
					return nil, err
				}
				a = append(a, v)
			}
			_, err := dec.Token()
			return a, err
		}
	}
	return tok, nil
}

// A schema is a node of a JSON Schema and the document its $refs resolve
// in.
type schema struct {
	node *object
	doc  *object
	file string
}

// ref resolves the node's $ref ("#/definitions/x", "#/$defs/x"), giving
// the definition's name; s itself and "" without one.
func (s schema) ref() (schema, string) {
	r := s.node.str("$ref")
	if r == "" {
		return s, ""
	}
	n := s.doc
	name := ""
	for _, part := range strings.Split(strings.TrimPrefix(r, "#/"), "/") {
		n = n.obj(part)
		name = part
	}
	if n == nil {
		panic(fmt.Sprintf("%s: $ref %s resolves to nothing", s.file, r))
	}
	return schema{n, s.doc, s.file}, name
}

func (s schema) at(n *object) schema { return schema{n, s.doc, s.file} }

// branches are the subschemas a node combines (allOf, oneOf, anyOf).
func (s schema) branches() []schema {
	var out []schema
	for _, k := range []string{"allOf", "oneOf", "anyOf"} {
		list, _ := s.node.get(k).([]any)
		for _, b := range list {
			if o, ok := b.(*object); ok {
				out = append(out, s.at(o))
			}
		}
	}
	return out
}

// properties are the keys of the object a node describes, in order, with
// those of its $ref and of its branches (a policy is a string or an
// object with keys), and the keys required where they are declared.
func (s schema) properties() ([]string, map[string]schema) {
	keys, m, _ := s.props()
	return keys, m
}

func (s schema) props() ([]string, map[string]schema, map[string]bool) {
	var keys []string
	m := map[string]schema{}
	required := map[string]bool{}
	var walk func(s schema, depth int)
	walk = func(s schema, depth int) {
		if depth > 8 {
			return
		}
		s, _ = s.ref()
		if p := s.node.obj("properties"); p != nil {
			for _, k := range p.keys {
				if _, ok := m[k]; !ok {
					keys = append(keys, k)
					m[k] = s.at(p.obj(k))
				}
			}
			req, _ := s.node.get("required").([]any)
			for _, k := range req {
				required[k.(string)] = true
			}
		}
		for _, b := range s.branches() {
			walk(b, depth+1)
		}
	}
	walk(s, 0)
	return keys, m, required
}

// items is the schema of a list's items, if the node (or a branch of it)
// is a list of objects with keys.
func (s schema) items() (schema, bool) {
	s, _ = s.ref()
	if it := s.node.obj("items"); it != nil {
		return s.at(it), true
	}
	for _, b := range s.branches() {
		if it, ok := b.items(); ok {
			return it, true
		}
	}
	return schema{}, false
}

// description is the node's own description, else its $ref's.
func (s schema) description() string {
	if d := s.node.str("description"); d != "" {
		return d
	}
	// A key whose value is a duration or a glob says what it is for; the
	// types' own descriptions say only how they are written.
	if r, name := s.ref(); name != "" && name != "duration" && name != "glob" {
		return r.description()
	}
	for _, b := range s.branches() {
		if d := b.node.str("description"); d != "" {
			return d
		}
	}
	return ""
}

// namedTypes are definitions the page names rather than spells out; the
// "Values" section of the page says what each is.
var namedTypes = map[string]string{
	"duration": "duration", "over": "duration", "glob": "glob",
	"labels": "templates", "annotations": "templates",
}

// typeName says in words what a node's value is.
func (s schema) typeName() string {
	r, name := s.ref()
	if t, ok := namedTypes[name]; ok {
		return t
	}
	s = r
	if e, ok := s.node.get("enum").([]any); ok {
		var w []string
		for _, v := range e {
			w = append(w, "`"+fmt.Sprint(v)+"`")
		}
		return "one of " + strings.Join(w, ", ")
	}
	var types []string
	switch t := s.node.get("type").(type) {
	case string:
		types = []string{t}
	case []any:
		for _, x := range t {
			types = append(types, x.(string))
		}
	}
	var words []string
	for _, t := range types {
		switch t {
		case "null":
			continue
		case "array":
			if it, ok := s.items(); ok {
				words = append(words, "list of "+it.typeName())
			} else {
				words = append(words, "list")
			}
		case "object":
			if a := s.node.obj("additionalProperties"); a != nil && s.node.obj("properties") == nil {
				words = append(words, "map of "+s.at(a).typeName())
			} else {
				words = append(words, "mapping")
			}
		case "number":
			words = append(words, "number")
		default:
			words = append(words, t)
		}
	}
	if len(words) == 0 {
		seen := map[string]bool{}
		for _, b := range s.branches() {
			if w := b.typeName(); w != "" && !seen[w] {
				seen[w] = true
				words = append(words, w)
			}
		}
	}
	return strings.Join(words, " or ")
}

// bounds says in words what the schema bounds a value to, "" when it
// does not. Named types' bounds are said in the Values section.
func (s schema) bounds() string {
	r, name := s.ref()
	if _, ok := namedTypes[name]; ok {
		return ""
	}
	n := r.node
	var out []string
	num := func(k string) (string, bool) {
		v, ok := n.get(k).(json.Number)
		return v.String(), ok
	}
	lo, hasLo := num("minimum")
	if v, ok := num("exclusiveMinimum"); ok {
		lo, hasLo = "more than "+v, true
	} else if hasLo {
		lo = "at least " + lo
	}
	hi, hasHi := num("maximum")
	switch {
	case hasLo && hasHi && strings.HasPrefix(lo, "at least "):
		out = append(out, strings.TrimPrefix(lo, "at least ")+" to "+hi)
	case hasLo && hasHi:
		out = append(out, lo+", at most "+hi)
	case hasLo:
		out = append(out, lo)
	case hasHi:
		out = append(out, "at most "+hi)
	}
	if v, ok := num("minLength"); ok && v != "1" {
		out = append(out, "at least "+v+" characters")
	}
	if v, ok := num("maxLength"); ok {
		out = append(out, "at most "+v+" bytes")
	}
	if v, ok := num("minItems"); ok {
		if v == "1" {
			out = append(out, "not empty")
		} else {
			out = append(out, "at least "+v+" items")
		}
	}
	if v, ok := num("maxItems"); ok {
		out = append(out, "at most "+v+" items")
	}
	if v, ok := num("maxProperties"); ok {
		out = append(out, "at most "+v+" entries")
	}
	if u, _ := n.get("uniqueItems").(bool); u {
		out = append(out, "no item twice")
	}
	// A pattern is shown when it is short enough to read; longer ones
	// (a rule's when:) are said in words by the description.
	if p := n.str("pattern"); p != "" && len(p) <= 60 {
		out = append(out, "matches `"+p+"`")
	}
	if it, ok := r.items(); ok && n.get("type") == "array" {
		if b := it.bounds(); b != "" && it.node.obj("properties") == nil {
			out = append(out, "each "+b)
		}
	}
	return strings.Join(out, "; ")
}

// defaultValue is the node's default: its default keyword, else what its
// description says ("(default 10s", "Default true."), else "".
func (s schema) defaultValue() string {
	if v := s.node.get("default"); v != nil {
		if str, ok := v.(string); ok {
			return "`" + str + "`"
		}
		b, err := json.Marshal(plain(v))
		if err != nil {
			panic(err)
		}
		return "`" + string(b) + "`"
	}
	if m := defaultRE.FindStringSubmatch(s.description()); m != nil {
		return m[1]
	}
	return ""
}

// defaultRE finds the default a description states: "(default 10s; ...)",
// "(...; default 0: at once)", "Default true.".
var defaultRE = regexp.MustCompile(`(?:^|[(;] ?|\. )[Dd]efault:? (.*?)(?:[;)]|: |\. |\.?$)`)

// plain turns parsed JSON back into values encoding/json writes.
func plain(v any) any {
	switch t := v.(type) {
	case *object:
		m := map[string]any{}
		for k, x := range t.m {
			m[k] = plain(x)
		}
		return m
	case []any:
		out := make([]any, len(t))
		for i, x := range t {
			out[i] = plain(x)
		}
		return out
	}
	return v
}
