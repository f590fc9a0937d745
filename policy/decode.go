package policy

import (
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/spanwatch/spanwatch/config/section"
)

// MaxFileBytes bounds the configuration file and each file it names.
const MaxFileBytes = section.MaxFileBytes

// decoder decodes yaml.Nodes strictly into the file's section.Decoder,
// which collects every error with its position instead of stopping at
// the first.
type decoder struct {
	*section.Decoder
}

// errorf records an error at node n.
func (d *decoder) errorf(n *yaml.Node, format string, a ...any) { d.Errorf(n, format, a...) }

// str decodes a scalar as a string. Integers and numbers are taken as
// written; lists, mappings, booleans and null are errors.
func (d *decoder) str(n *yaml.Node, what string) (string, bool) {
	n = section.Resolve(n)
	if n.Kind != yaml.ScalarNode {
		d.errorf(n, "%s must be a string, not %s", what, section.KindName(n))
		return "", false
	}
	switch n.ShortTag() {
	case "!!str", "!!int", "!!float":
		return n.Value, true
	}
	d.errorf(n, "%s must be a string, not %s", what, section.KindName(n))
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

func (d *decoder) duration(n *yaml.Node, what string) (time.Duration, bool) {
	n = section.Resolve(n)
	if n.Kind != yaml.ScalarNode || n.ShortTag() == "!!null" || n.ShortTag() == "!!bool" {
		d.errorf(n, "%s must be a duration like 30s, not %s", what, section.KindName(n))
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
	n = section.Resolve(n)
	if n.Kind != yaml.ScalarNode || (n.ShortTag() != "!!int" && n.ShortTag() != "!!float") {
		d.errorf(n, "%s must be a number, not %s", what, section.KindName(n))
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
	n = section.Resolve(n)
	if n.Kind != yaml.ScalarNode || n.ShortTag() != "!!int" {
		d.errorf(n, "%s must be an integer, not %s", what, section.KindName(n))
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
	n = section.Resolve(n)
	if n.Kind != yaml.ScalarNode || n.ShortTag() != "!!bool" {
		d.errorf(n, "%s must be true or false, not %s", what, section.KindName(n))
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
	n = section.Resolve(n)
	if n.Kind == yaml.ScalarNode && n.ShortTag() == "!!null" {
		return nil
	}
	if n.Kind != yaml.SequenceNode {
		d.errorf(n, "%s must be a list, not %s", what, section.KindName(n))
		return nil
	}
	return n.Content
}

// strings decodes a string or a list of strings.
func (d *decoder) strList(n *yaml.Node, what string) []string {
	n = section.Resolve(n)
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
	n = section.Resolve(n)
	if n.Kind == yaml.ScalarNode && n.ShortTag() == "!!null" {
		return nil
	}
	if n.Kind != yaml.MappingNode {
		d.errorf(n, "%s must be a mapping, not %s", what, section.KindName(n))
		return nil
	}
	out := map[string]*Template{}
	d.Fields(n, what, nil, func(key string, k, v *yaml.Node) {
		if labels && !labelNameRE.MatchString(key) {
			d.errorf(k, "%s: bad label name %q: want letters, digits and underscores, not starting with a digit", what, key)
			return
		}
		if slices.Contains(reserved, key) {
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
		t.pos = d.pos(v)
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
