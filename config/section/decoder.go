package section

import (
	"fmt"
	"slices"
	"strings"
	"unicode/utf8"

	"gopkg.in/yaml.v3"
)

// A Decoder collects the errors of one file while its sections decode, so
// that one load reports every problem at once. A decoder goes on after an
// error: the section's other values are still checked.
type Decoder struct {
	// File is the file's name, as errors show it.
	File string
	// lines is the source, so that an error inside a scalar (a condition)
	// can point at its column.
	lines []string
	errs  ErrorList
}

// NewDecoder returns a Decoder for file, whose content is data (nil when
// unknown: errors then point at whole values).
func NewDecoder(file string, data []byte) *Decoder {
	d := &Decoder{File: file}
	if data != nil {
		d.lines = strings.Split(string(data), "\n")
	}
	return d
}

// Errorf records an error at node n (the file without a position when n is
// nil) and returns it.
func (d *Decoder) Errorf(n *yaml.Node, format string, a ...any) *Error {
	e := Errorf(d.File, n, format, a...)
	d.errs = append(d.errs, e)
	return e
}

// ErrorAt records an error at byte offset off inside scalar n's value. The
// column is exact when the value is written on one line as it reads
// (plain, or quoted without escapes); otherwise the error points at the
// scalar.
func (d *Decoder) ErrorAt(n *yaml.Node, off int, format string, a ...any) *Error {
	e := d.Errorf(n, format, a...)
	if n == nil || n.Line < 1 || n.Line > len(d.lines) || off < 0 || off > len(n.Value) {
		return e
	}
	line := d.lines[n.Line-1]
	col := n.Column - 1 // 0-based, in runes
	if n.Style == yaml.SingleQuotedStyle || n.Style == yaml.DoubleQuotedStyle {
		col++
	} else if n.Style != 0 {
		return e // block scalars start on the next line
	}
	// The line's text at the scalar, in runes as yaml.v3 counts columns.
	runes := []rune(line)
	if col > len(runes) {
		return e
	}
	prefix := n.Value[:off]
	if !strings.HasPrefix(string(runes[col:]), prefix) {
		return e // escapes or folding: the value does not read as written
	}
	e.Col = col + utf8.RuneCountInString(prefix) + 1
	return e
}

// Flag records a problem with a command-line value; format starts with
// the flag's name.
func (d *Decoder) Flag(format string, a ...any) {
	d.errs = append(d.errs, &Error{Msg: fmt.Sprintf(format, a...)})
}

// Add records err: its Errors as they are (Flatten), any other error as
// the file's, without a position.
func (d *Decoder) Add(err error) {
	d.errs = append(d.errs, Flatten(d.File, err)...)
}

// Len is how many errors were recorded: a section compares it before and
// after a value to know whether the value decoded.
func (d *Decoder) Len() int { return len(d.errs) }

// Errors returns the errors recorded, in the order they were.
func (d *Decoder) Errors() ErrorList { return d.errs }

// Err returns the errors recorded as an ErrorList, or nil.
func (d *Decoder) Err() error {
	if len(d.errs) == 0 {
		return nil
	}
	return d.errs
}

// maxAliasDepth bounds how many aliases Resolve follows: ParseDocument has
// bounded the document's nesting and size already.
const maxAliasDepth = 64

// Resolve follows aliases to the node they name.
func Resolve(n *yaml.Node) *yaml.Node {
	for i := 0; n != nil && n.Kind == yaml.AliasNode && n.Alias != nil && i < maxAliasDepth; i++ {
		n = n.Alias
	}
	return n
}

// IsNull reports whether n is a null scalar (a key written without a
// value, ~, or null).
func IsNull(n *yaml.Node) bool {
	n = Resolve(n)
	return n != nil && n.Kind == yaml.ScalarNode && n.ShortTag() == "!!null"
}

// KindName says what n is, for messages: "a mapping", "a list", "null",
// "a boolean", "an integer", "a number", `the string "x"`, "an alias".
func KindName(n *yaml.Node) string {
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
		return fmt.Sprintf("the string %q", n.Value)
	}
	return "an alias"
}

// Fields decodes a mapping whose keys must be among keys (any key when
// keys is nil), calling f for each in file order with the resolved value.
// YAML merge keys ("<<: *defaults") are honoured; keys written out
// override merged ones. Keys that are not strings, unknown keys and keys
// given twice are errors, named by what ("rule", "budget"). It returns
// false when n is not a mapping.
func (d *Decoder) Fields(n *yaml.Node, what string, keys []string, f func(key string, k, v *yaml.Node)) bool {
	n = Resolve(n)
	if n.Kind != yaml.MappingNode {
		d.Errorf(n, "%s must be a mapping, not %s", what, KindName(n))
		return false
	}
	type kv struct{ k, v *yaml.Node }
	var order []string
	seen := map[string]kv{}
	merged := map[string]bool{}
	var addMerge func(m *yaml.Node, depth int)
	addMerge = func(m *yaml.Node, depth int) {
		m = Resolve(m)
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
			d.Errorf(m, "merge key (<<) in %s needs a mapping or a list of mappings", what)
			return
		}
		for i := 0; i+1 < len(m.Content); i += 2 {
			k := Resolve(m.Content[i])
			if _, ok := seen[k.Value]; ok {
				continue
			}
			seen[k.Value] = kv{k, m.Content[i+1]}
			merged[k.Value] = true
			order = append(order, k.Value)
		}
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k := Resolve(n.Content[i])
		if k.Kind == yaml.ScalarNode && k.Tag == "!!merge" {
			addMerge(n.Content[i+1], 0)
		}
	}
	explicit := map[string]bool{}
	var firstOrder []string
	for i := 0; i+1 < len(n.Content); i += 2 {
		k := Resolve(n.Content[i])
		if k.Kind == yaml.ScalarNode && k.Tag == "!!merge" {
			continue
		}
		if k.Kind != yaml.ScalarNode {
			d.Errorf(k, "%s: keys must be strings, not %s", what, KindName(k))
			continue
		}
		if explicit[k.Value] {
			d.Errorf(k, "%s: duplicate key %q", what, k.Value)
			continue
		}
		explicit[k.Value] = true
		if keys != nil && !slices.Contains(keys, k.Value) {
			d.Errorf(k, "%s: unknown key %q (want one of: %s)", what, k.Value, strings.Join(keys, ", "))
			continue
		}
		seen[k.Value] = kv{k, n.Content[i+1]}
		firstOrder = append(firstOrder, k.Value)
	}
	for _, key := range order {
		if explicit[key] || !merged[key] {
			continue
		}
		if keys != nil && !slices.Contains(keys, key) {
			e := seen[key]
			d.Errorf(e.k, "%s: unknown key %q from merge (want one of: %s)", what, key, strings.Join(keys, ", "))
			continue
		}
		firstOrder = append(firstOrder, key)
	}
	for _, key := range firstOrder {
		e := seen[key]
		f(key, e.k, Resolve(e.v))
	}
	return true
}
