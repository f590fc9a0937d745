package policy

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"gopkg.in/yaml.v3"
)

// Limits on a rule file, checked before anything is decoded so a hostile or
// broken file (an alias bomb, a million nested brackets) fails fast.
const (
	MaxFileBytes = 8 << 20 // 8 MiB
	maxDepth     = 64      // nesting levels, aliases followed
	maxNodes     = 1 << 20 // nodes visited, aliases expanded each time
)

// decoder decodes yaml.Nodes strictly, collecting every error with its
// position instead of stopping at the first.
type decoder struct {
	file string
	errs ErrorList
	// lines is the source, so an error inside a scalar (a condition) can
	// point at its column.
	lines []string
}

// checkTree walks the document, expanding aliases, and fails once it is
// deeper than maxDepth or bigger than maxNodes: an alias bomb (each level
// referring to the previous one several times) reaches the node budget
// after visiting at most maxNodes nodes, however large its expansion.
func checkTree(file string, root *yaml.Node) error {
	visited := 0
	var walk func(n *yaml.Node, depth int) error
	walk = func(n *yaml.Node, depth int) error {
		visited++
		if visited > maxNodes {
			return &Error{File: file, Line: n.Line, Col: n.Column, Msg: fmt.Sprintf("document too large: more than %d nodes once aliases are expanded (alias bomb?)", maxNodes)}
		}
		if depth > maxDepth {
			return &Error{File: file, Line: n.Line, Col: n.Column, Msg: fmt.Sprintf("document nested deeper than %d levels", maxDepth)}
		}
		if n.Kind == yaml.AliasNode {
			if n.Alias == nil {
				return &Error{File: file, Line: n.Line, Col: n.Column, Msg: "alias to an unknown anchor"}
			}
			return walk(n.Alias, depth+1)
		}
		for _, c := range n.Content {
			if err := walk(c, depth+1); err != nil {
				return err
			}
		}
		return nil
	}
	return walk(root, 0)
}

// resolve follows aliases.
func resolve(n *yaml.Node) *yaml.Node {
	for i := 0; n != nil && n.Kind == yaml.AliasNode && i < maxDepth; i++ {
		n = n.Alias
	}
	return n
}

func kindName(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.ScalarNode:
		switch n.ShortTag() {
		case "!!null":
			return "null"
		case "!!bool":
			return "a boolean"
		case "!!int":
			return "an integer"
		case "!!float":
			return "a number"
		}
		return "a string"
	}
	return "an alias"
}

// fields decodes a mapping whose keys must be among keys (any key when keys
// is nil), calling f for each in file order. YAML merge keys ("<<: *defaults") are honoured; keys
// written out override merged ones.
func (d *decoder) fields(n *yaml.Node, what string, keys []string, f func(key string, k, v *yaml.Node)) bool {
	n = resolve(n)
	if n.Kind != yaml.MappingNode {
		d.errorf(n, "%s must be a mapping, not %s", what, kindName(n))
		return false
	}
	type kv struct{ k, v *yaml.Node }
	var order []string
	seen := map[string]kv{}
	merged := map[string]bool{}
	var addMerge func(m *yaml.Node, depth int)
	addMerge = func(m *yaml.Node, depth int) {
		m = resolve(m)
		if depth > 2 {
			return
		}
		switch m.Kind {
		case yaml.SequenceNode:
			for _, c := range m.Content {
				addMerge(c, depth+1)
			}
			return
		case yaml.MappingNode:
		default:
			d.errorf(m, "merge key (<<) in %s needs a mapping or a list of mappings", what)
			return
		}
		for i := 0; i+1 < len(m.Content); i += 2 {
			k := resolve(m.Content[i])
			if _, ok := seen[k.Value]; ok {
				continue
			}
			seen[k.Value] = kv{k, m.Content[i+1]}
			merged[k.Value] = true
			order = append(order, k.Value)
		}
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k := resolve(n.Content[i])
		if k.Kind == yaml.ScalarNode && k.Tag == "!!merge" {
			addMerge(n.Content[i+1], 0)
		}
	}
	explicit := map[string]bool{}
	var firstOrder []string
	for i := 0; i+1 < len(n.Content); i += 2 {
		k := resolve(n.Content[i])
		if k.Kind == yaml.ScalarNode && k.Tag == "!!merge" {
			continue
		}
		if k.Kind != yaml.ScalarNode {
			d.errorf(k, "%s: keys must be strings, not %s", what, kindName(k))
			continue
		}
		if explicit[k.Value] {
			d.errorf(k, "%s: duplicate key %q", what, k.Value)
			continue
		}
		explicit[k.Value] = true
		if keys != nil && !contains(keys, k.Value) {
			d.errorf(k, "%s: unknown key %q (want one of: %s)", what, k.Value, strings.Join(keys, ", "))
			continue
		}
		seen[k.Value] = kv{k, n.Content[i+1]}
		firstOrder = append(firstOrder, k.Value)
	}
	for _, key := range order {
		if explicit[key] || !merged[key] {
			continue
		}
		if keys != nil && !contains(keys, key) {
			e := seen[key]
			d.errorf(e.k, "%s: unknown key %q from merge (want one of: %s)", what, key, strings.Join(keys, ", "))
			continue
		}
		firstOrder = append(firstOrder, key)
	}
	for _, key := range firstOrder {
		e := seen[key]
		f(key, e.k, resolve(e.v))
	}
	return true
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// str decodes a scalar as a string. Integers and numbers are taken as
// written; lists, mappings, booleans and null are errors.
func (d *decoder) str(n *yaml.Node, what string) (string, bool) {
	n = resolve(n)
	if n.Kind != yaml.ScalarNode {
		d.errorf(n, "%s must be a string, not %s", what, kindName(n))
		return "", false
	}
	switch n.ShortTag() {
	case "!!str", "!!int", "!!float":
		return n.Value, true
	}
	d.errorf(n, "%s must be a string, not %s", what, kindName(n))
	return "", false
}

// name decodes a non-empty string.
func (d *decoder) name(n *yaml.Node, what string) (string, bool) {
	s, ok := d.str(n, what)
	if ok && strings.TrimSpace(s) == "" {
		d.errorf(n, "%s must not be empty", what)
		return "", false
	}
	return s, ok
}

// errorAt records an error at byte offset off inside scalar n's value. The
// column is exact when the value is written on one line as it reads
// (plain or quoted without escapes); otherwise the error points at the
// scalar.
func (d *decoder) errorAt(n *yaml.Node, off int, format string, a ...any) {
	d.errorf(n, format, a...)
	e := d.errs[len(d.errs)-1]
	if n == nil || n.Line < 1 || n.Line > len(d.lines) || off < 0 || off > len(n.Value) {
		return
	}
	line := d.lines[n.Line-1]
	col := n.Column - 1 // 0-based, in runes
	if n.Style == yaml.SingleQuotedStyle || n.Style == yaml.DoubleQuotedStyle {
		col++
	} else if n.Style != 0 {
		return // block scalars start on the next line
	}
	// The line's text at the scalar, in runes as yaml.v3 counts columns.
	runes := []rune(line)
	if col > len(runes) {
		return
	}
	prefix := n.Value[:off]
	if !strings.HasPrefix(string(runes[col:]), prefix) {
		return // escapes or folding: the value does not read as written
	}
	e.Col = col + utf8.RuneCountInString(prefix) + 1
}

func (d *decoder) duration(n *yaml.Node, what string) (time.Duration, bool) {
	n = resolve(n)
	if n.Kind != yaml.ScalarNode || n.ShortTag() == "!!null" || n.ShortTag() == "!!bool" {
		d.errorf(n, "%s must be a duration like 30s, not %s", what, kindName(n))
		return 0, false
	}
	if n.Value == "0" {
		return 0, true
	}
	v, err := parseDuration(n.Value)
	if err != nil {
		d.errorf(n, "%s: %v", what, err)
		return 0, false
	}
	return v, true
}

func (d *decoder) number(n *yaml.Node, what string) (float64, bool) {
	n = resolve(n)
	if n.Kind != yaml.ScalarNode || (n.ShortTag() != "!!int" && n.ShortTag() != "!!float") {
		d.errorf(n, "%s must be a number, not %s", what, kindName(n))
		return 0, false
	}
	f, err := strconv.ParseFloat(n.Value, 64)
	if err != nil || f != f || f > 1e300 || f < -1e300 {
		d.errorf(n, "%s: bad number %q", what, n.Value)
		return 0, false
	}
	return f, true
}

func (d *decoder) integer(n *yaml.Node, what string) (int64, bool) {
	n = resolve(n)
	if n.Kind != yaml.ScalarNode || n.ShortTag() != "!!int" {
		d.errorf(n, "%s must be an integer, not %s", what, kindName(n))
		return 0, false
	}
	v, err := strconv.ParseInt(n.Value, 0, 64)
	if err != nil {
		d.errorf(n, "%s: bad integer %q", what, n.Value)
		return 0, false
	}
	return v, true
}

func (d *decoder) boolean(n *yaml.Node, what string) (bool, bool) {
	n = resolve(n)
	if n.Kind != yaml.ScalarNode || n.ShortTag() != "!!bool" {
		d.errorf(n, "%s must be true or false, not %s", what, kindName(n))
		return false, false
	}
	var b bool
	if err := n.Decode(&b); err != nil {
		d.errorf(n, "%s: %v", what, err)
		return false, false
	}
	return b, true
}

func (d *decoder) seq(n *yaml.Node, what string) []*yaml.Node {
	n = resolve(n)
	if n.Kind == yaml.ScalarNode && n.ShortTag() == "!!null" {
		return nil
	}
	if n.Kind != yaml.SequenceNode {
		d.errorf(n, "%s must be a list, not %s", what, kindName(n))
		return nil
	}
	return n.Content
}

// strings decodes a string or a list of strings.
func (d *decoder) strList(n *yaml.Node, what string) []string {
	n = resolve(n)
	if n.Kind == yaml.ScalarNode {
		if s, ok := d.name(n, what); ok {
			return []string{s}
		}
		return nil
	}
	var out []string
	for _, c := range d.seq(n, what) {
		if s, ok := d.name(c, what); ok {
			out = append(out, s)
		}
	}
	return out
}

var labelNameRE = regexp.MustCompile(`^[a-zA-Z_][a-zA-Z0-9_]*$`)

// templates decodes a mapping of label or annotation names to templates.
func (d *decoder) templates(n *yaml.Node, what string, labels bool, reserved ...string) map[string]*Template {
	n = resolve(n)
	if n.Kind == yaml.ScalarNode && n.ShortTag() == "!!null" {
		return nil
	}
	if n.Kind != yaml.MappingNode {
		d.errorf(n, "%s must be a mapping, not %s", what, kindName(n))
		return nil
	}
	out := map[string]*Template{}
	d.fields(n, what, nil, func(key string, k, v *yaml.Node) {
		if labels && !labelNameRE.MatchString(key) {
			d.errorf(k, "%s: bad label name %q: want letters, digits and underscores, not starting with a digit", what, key)
			return
		}
		if contains(reserved, key) {
			d.errorf(k, "%s: label %q is set by spanwatch and cannot be overridden here", what, key)
			return
		}
		s, ok := d.str(v, what+"."+key)
		if !ok {
			return
		}
		t, err := CompileTemplate(key, s)
		if err != nil {
			d.errorf(v, "%s.%s: %v", what, key, err)
			return
		}
		out[key] = t
	})
	return out
}

func (d *decoder) glob(n *yaml.Node, what string) *Glob {
	s, ok := d.name(n, what)
	if !ok {
		return nil
	}
	g, err := CompileGlob(s)
	if err != nil {
		d.errorf(n, "%s: %v", what, err)
		return nil
	}
	return g
}
