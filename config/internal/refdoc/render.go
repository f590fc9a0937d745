package main

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/spanwatch/spanwatch/config"
)

// The schema files besides config.Schema(), relative to the module root,
// and the page's hand-written parts.
const (
	notifySchema   = "notify/schema.json"
	usdtSchema     = "internal/usdt/sources.schema.json"
	tpsourceSchema = "internal/tpsource/sources.schema.json"
	pageTemplate   = "config/internal/refdoc/configuration.md.in"
	configSchema   = "config/schema.json"
)

// schemas are the four documents, parsed.
type schemas struct {
	config, notify, usdt, tpsource schema
}

func loadSchemas(root string) (*schemas, error) {
	load := func(file string, data []byte) (schema, error) {
		if data == nil {
			var err error
			if data, err = os.ReadFile(filepath.Join(root, file)); err != nil {
				return schema{}, err
			}
		}
		v, err := parseJSON(data)
		if err != nil {
			return schema{}, fmt.Errorf("%s: %w", file, err)
		}
		o, ok := v.(*object)
		if !ok {
			return schema{}, fmt.Errorf("%s: not a JSON object", file)
		}
		return schema{o, o, file}, nil
	}
	var s schemas
	var err error
	if s.config, err = load(configSchema, config.Schema()); err != nil {
		return nil, err
	}
	if s.notify, err = load(notifySchema, nil); err != nil {
		return nil, err
	}
	if s.usdt, err = load(usdtSchema, nil); err != nil {
		return nil, err
	}
	if s.tpsource, err = load(tpsourceSchema, nil); err != nil {
		return nil, err
	}
	return &s, nil
}

// section returns the schema of a top-level section: config's, or, for
// the sections other packages decode, theirs.
func (s *schemas) section(key string) (schema, []string) {
	own := s.config.at(s.config.node.obj("properties").obj(key))
	switch key {
	case "webhooks", "routing":
		n := s.notify.at(s.notify.node.obj("properties").obj(key))
		return n, []string{n.node.str("description"), own.node.str("description")}
	case "sources":
		return s.usdt, []string{own.node.str("description")}
	}
	return own, []string{own.node.str("description")}
}

// A row is one key of the reference.
type row struct {
	key, typ, def, bounds, meaning string
}

// rows lists the keys of s and of the mappings and lists of mappings below
// them, each prefixed with prefix, and the keys that lack a description.
func rows(s schema, prefix string, missing *[]string) []row {
	keys, props, required := s.props()
	var out []row
	for _, k := range keys {
		p := props[k]
		d := p.description()
		if d == "" {
			*missing = append(*missing, fmt.Sprintf("%s: %s%s", p.file, prefix, k))
		}
		def := p.defaultValue()
		if required[k] {
			def = "required"
		}
		out = append(out, row{prefix + k, p.typeName(), def, p.bounds(), d})
		if sub, _ := p.properties(); len(sub) > 0 {
			out = append(out, rows(p, prefix+k+".", missing)...)
		} else if it, ok := p.items(); ok {
			if sub, _ := it.properties(); len(sub) > 0 {
				out = append(out, rows(it, prefix+k+"[].", missing)...)
			}
		}
	}
	return out
}

func cell(s string) string {
	if s == "" {
		return ""
	}
	return strings.ReplaceAll(strings.ReplaceAll(s, "|", `\|`), "\n", " ")
}

func table(b *bytes.Buffer, rs []row) {
	b.WriteString("| Key | Type | Default | Bounds | Meaning |\n|---|---|---|---|---|\n")
	for _, r := range rs {
		fmt.Fprintf(b, "| `%s` | %s | %s | %s | %s |\n", r.key, cell(r.typ), cell(r.def), cell(r.bounds), cell(r.meaning))
	}
}

// writeSection writes the reference of one top-level section.
func (s *schemas) writeSection(b *bytes.Buffer, key string, missing *[]string) {
	sch, descs := s.section(key)
	fmt.Fprintf(b, "## `%s:`\n\n", key)
	for _, d := range descs {
		if d != "" {
			b.WriteString(d + "\n\n")
		}
	}
	if key == "sources" {
		// Each kind of source is its own package's: usdt: internal/usdt's
		// schema, user_events: and eventheader: internal/tpsource's.
		keys, props := sch.properties()
		_, tp := s.tpsource.properties()
		for _, k := range keys {
			p := props[k]
			if t, ok := tp[k]; ok {
				p = t
			}
			it, _ := p.items()
			fmt.Fprintf(b, "### `sources: %s:`\n\n", k)
			if d := p.description(); d != "" {
				b.WriteString(d + "\n\n")
			} else {
				*missing = append(*missing, fmt.Sprintf("%s: sources.%s", p.file, k))
			}
			fmt.Fprintf(b, "A list; each item:\n\n")
			table(b, rows(it, "", missing))
			b.WriteString("\n")
		}
		return
	}
	if descs[0] == "" && sch.description() == "" {
		*missing = append(*missing, fmt.Sprintf("%s: %s", sch.file, key))
	}
	typ := sch.typeName()
	if bd := sch.bounds(); bd != "" {
		typ += "; " + bd
	}
	fmt.Fprintf(b, "Type: %s.\n\n", typ)
	if it, ok := sch.items(); ok {
		if sub, _ := it.properties(); len(sub) > 0 {
			b.WriteString("Each item:\n\n")
			table(b, rows(it, "", missing))
			b.WriteString("\n")
		}
		return
	}
	if sub, _ := sch.properties(); len(sub) > 0 {
		table(b, rows(sch, "", missing))
		b.WriteString("\n")
	}
}

// writeValues writes the named value types the tables use.
func (s *schemas) writeValues(b *bytes.Buffer) {
	defs := s.config.node.obj("definitions")
	b.WriteString("| Type | Written as |\n|---|---|\n")
	for _, v := range []struct{ name, def string }{
		{"duration", "duration"}, {"glob", "glob"},
	} {
		fmt.Fprintf(b, "| %s | %s |\n", v.name, cell(defs.obj(v.def).str("description")))
	}
	fmt.Fprintf(b, "| templates | A mapping of label (or annotation) names to values, each: %s See [Templates](#templates). |\n",
		cell(defs.obj("labels").obj("additionalProperties").str("description")))
}

const marker = "<!-- keys: "

// render builds the page: the template with each marker replaced by its
// section's reference.
func render(root string) ([]byte, error) {
	s, err := loadSchemas(root)
	if err != nil {
		return nil, err
	}
	tmpl, err := os.ReadFile(filepath.Join(root, pageTemplate))
	if err != nil {
		return nil, err
	}
	var b bytes.Buffer
	fmt.Fprintf(&b, "<!-- Generated by go run ./config/internal/refdoc (go generate ./config) from %s, %s, %s, %s and %s: edit those, not this file. -->\n\n",
		configSchema, notifySchema, usdtSchema, tpsourceSchema, pageTemplate)
	top := s.config.node.obj("properties").keys
	placed := map[string]bool{}
	var missing, errs []string
	sc := bufio.NewScanner(bytes.NewReader(tmpl))
	line := 0
	for sc.Scan() {
		line++
		t := sc.Text()
		switch {
		case t == "<!-- values -->":
			s.writeValues(&b)
		case strings.HasPrefix(t, marker) && strings.HasSuffix(t, " -->"):
			key := strings.TrimSuffix(strings.TrimPrefix(t, marker), " -->")
			known := false
			for _, k := range top {
				known = known || k == key
			}
			switch {
			case !known:
				errs = append(errs, fmt.Sprintf("%s:%d: no section %q in the configuration's schema", pageTemplate, line, key))
			case placed[key]:
				errs = append(errs, fmt.Sprintf("%s:%d: section %q placed twice", pageTemplate, line, key))
			default:
				placed[key] = true
				s.writeSection(&b, key, &missing)
			}
		default:
			b.WriteString(t + "\n")
		}
	}
	for _, k := range top {
		if !placed[k] {
			errs = append(errs, fmt.Sprintf("%s: section %q is not placed: add a line %s%s -->", pageTemplate, k, marker, k))
		}
	}
	sort.Strings(missing)
	for _, m := range missing {
		errs = append(errs, m+": no description: add one to the schema")
	}
	if len(errs) > 0 {
		return nil, errors.New(strings.Join(errs, "\n"))
	}
	out := bytes.TrimRight(b.Bytes(), "\n")
	return append(out, '\n'), nil
}
