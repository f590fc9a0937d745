package srcspec

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/spanwatch/spanwatch/config/section"
)

// DecodePredicate parses the predicate in scalar node n (an error: option)
// with the source's operands, reporting into d: a syntax error at the
// offending byte, with the predicate and a caret under that byte. It
// returns nil on error.
func DecodePredicate(d *section.Decoder, n *yaml.Node, resolve Resolver) *Predicate {
	if n.Kind != yaml.ScalarNode || n.Tag == "!!null" {
		d.Errorf(n, "error must be a predicate, like \"arg2 >= 500\"")
		return nil
	}
	if strings.TrimSpace(n.Value) == "" {
		d.Errorf(n, "error must not be empty: write a predicate, like \"arg2 >= 500\"")
		return nil
	}
	p, err := ParsePredicate(n.Value, resolve)
	if err != nil {
		var se *SyntaxError
		if errors.As(err, &se) {
			d.ErrorInScalar(n, se.Offset, "error: "+se.Msg)
		} else {
			d.Errorf(n, "error: %v", err)
		}
		return nil
	}
	return p
}

// DecodeLabels decodes a labels: mapping of label names to operands
// ({status: arg2}), in file order, reporting every problem into d. ok is
// false when there was one.
func DecodeLabels(d *section.Decoder, n *yaml.Node, resolve Resolver) (labels []Label, ok bool) {
	return DecodeLabelsFunc(d, n, func(name string, v *yaml.Node) (int, bool) {
		if v.Kind != yaml.ScalarNode || v.Tag == "!!null" || v.Value == "" {
			d.Errorf(v, "label %s: want an operand, like arg2", name)
			return 0, false
		}
		idx, err := resolve(v.Value)
		if err != nil {
			d.Errorf(v, "label %s: %v", name, err)
			return 0, false
		}
		return idx, true
	})
}

// DecodeLabelsFunc decodes a labels: mapping as DecodeLabels does (label
// names, their count, repeats), with value resolving each label's value
// node into its operand and reporting its own errors into d: for a
// source whose label values are not all operand names (a function's
// string argument, {ptr: arg1, len: arg2}). A label's OperandName is its
// value's text, or "" for a value that is not a scalar.
func DecodeLabelsFunc(d *section.Decoder, n *yaml.Node, value func(name string, v *yaml.Node) (int, bool)) (labels []Label, ok bool) {
	before := d.Len()
	if n.Kind != yaml.MappingNode {
		d.Errorf(n, "labels must be a mapping of label names to operands, like {status: arg2}")
		return nil, false
	}
	if len(n.Content)/2 > MaxLabels {
		d.Errorf(n, "%d labels: a series carries at most %d", len(n.Content)/2, MaxLabels)
	}
	var out []Label
	seen := map[string]bool{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		if k.Kind != yaml.ScalarNode {
			d.Errorf(k, "label names must be strings")
			continue
		}
		if err := CheckLabelName(k.Value); err != nil {
			d.Errorf(k, "%v", err)
			continue
		}
		if seen[k.Value] {
			d.Errorf(k, "label %s given twice", k.Value)
			continue
		}
		seen[k.Value] = true
		idx, good := value(k.Value, v)
		if !good {
			continue
		}
		name := ""
		if v.Kind == yaml.ScalarNode {
			name = v.Value
		}
		out = append(out, Label{Name: k.Value, Operand: idx, OperandName: name})
	}
	return out, d.Len() == before
}

// DecodeLabelCap decodes label_cap: 1 to MaxLabelCap distinct values,
// reporting a bad one into d.
func DecodeLabelCap(d *section.Decoder, n *yaml.Node) (int, bool) {
	v, err := strconv.ParseInt(n.Value, 0, 64)
	if n.Kind != yaml.ScalarNode || n.Tag != "!!int" || err != nil || v < 1 || v > MaxLabelCap {
		d.Errorf(n, "label_cap must be an integer from 1 to %d (distinct values kept per label; later ones are keyed \"other\")", MaxLabelCap)
		return 0, false
	}
	return int(v), true
}

// MaxMetricName is the longest metric name: a series name's room.
const MaxMetricName = 127

// CheckMetricName reports whether name may name an argument metric:
// letters, digits, _ . : and -, starting with a letter or _, at most
// MaxMetricName bytes.
func CheckMetricName(name string) error {
	if name == "" {
		return fmt.Errorf("empty metric name")
	}
	if len(name) > MaxMetricName {
		return fmt.Errorf("metric name is %d bytes, more than %d", len(name), MaxMetricName)
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		ok := c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' ||
			i > 0 && (c >= '0' && c <= '9' || c == '.' || c == ':' || c == '-')
		if !ok {
			return fmt.Errorf("metric name %q: want letters, digits, _ . : and -, starting with a letter or _", name)
		}
	}
	return nil
}
