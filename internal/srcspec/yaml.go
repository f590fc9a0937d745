package srcspec

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"
)

// ScalarPos returns the line and column of byte off of scalar node n's
// value in its file: past the opening quote of a quoted scalar, on the
// line it is on in a block scalar. Escapes in a double-quoted scalar are
// not accounted for.
func ScalarPos(n *yaml.Node, off int) (line, col int) {
	line, col = n.Line, n.Column
	switch n.Style {
	case yaml.DoubleQuotedStyle, yaml.SingleQuotedStyle:
		col++
	case yaml.LiteralStyle, yaml.FoldedStyle:
		// The value starts on the line after the indicator, at the
		// block's indentation, which yaml.v3 does not report: count
		// lines only.
		line++
		line += strings.Count(n.Value[:min(off, len(n.Value))], "\n")
		return line, 0
	}
	v := n.Value[:min(off, len(n.Value))]
	if i := strings.LastIndexByte(v, '\n'); i >= 0 {
		return line + strings.Count(v, "\n"), off - i
	}
	return line, col + off
}

// position renders file:line:col of byte off of scalar n.
func position(file string, n *yaml.Node, off int) string {
	line, col := ScalarPos(n, off)
	if col == 0 {
		return fmt.Sprintf("%s:%d", file, line)
	}
	return fmt.Sprintf("%s:%d:%d", file, line, col)
}

// ErrorAt returns an error at byte off of scalar n, "file:line:col: msg",
// followed by the scalar and a caret under that byte.
func ErrorAt(file string, n *yaml.Node, off int, msg string) error {
	se := &SyntaxError{Text: n.Value, Offset: off, Msg: msg}
	return fmt.Errorf("%s: %s\n%s", position(file, n, off), msg, se.Caret("\t"))
}

// DecodePredicate parses the predicate in scalar node n (an error: option)
// with the source's operands. Its error is "file:line:col: msg" at the
// offending byte, with the predicate and a caret under that byte.
func DecodePredicate(file string, n *yaml.Node, resolve Resolver) (*Predicate, error) {
	if n.Kind != yaml.ScalarNode || n.Tag == "!!null" {
		return nil, fmt.Errorf("%s:%d:%d: error must be a predicate, like \"arg2 >= 500\"", file, n.Line, n.Column)
	}
	if strings.TrimSpace(n.Value) == "" {
		return nil, fmt.Errorf("%s:%d:%d: error must not be empty: write a predicate, like \"arg2 >= 500\"", file, n.Line, n.Column)
	}
	p, err := ParsePredicate(n.Value, resolve)
	if err != nil {
		var se *SyntaxError
		if errors.As(err, &se) {
			return nil, ErrorAt(file, n, se.Offset, "error: "+se.Msg)
		}
		return nil, fmt.Errorf("%s:%d:%d: error: %w", file, n.Line, n.Column, err)
	}
	return p, nil
}

// DecodeLabels decodes a labels: mapping of label names to operands
// ({status: arg2}), in file order. Every problem is returned, each at its
// file:line:col.
func DecodeLabels(file string, n *yaml.Node, resolve Resolver) ([]Label, []error) {
	var errs []error
	at := func(x *yaml.Node, format string, a ...any) {
		errs = append(errs, fmt.Errorf("%s:%d:%d: %s", file, x.Line, x.Column, fmt.Sprintf(format, a...)))
	}
	if n.Kind != yaml.MappingNode {
		at(n, "labels must be a mapping of label names to operands, like {status: arg2}")
		return nil, errs
	}
	if len(n.Content)/2 > MaxLabels {
		at(n, "%d labels: a series carries at most %d", len(n.Content)/2, MaxLabels)
	}
	var out []Label
	seen := map[string]bool{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		if k.Kind != yaml.ScalarNode {
			at(k, "label names must be strings")
			continue
		}
		if err := CheckLabelName(k.Value); err != nil {
			at(k, "%v", err)
			continue
		}
		if seen[k.Value] {
			at(k, "label %s given twice", k.Value)
			continue
		}
		seen[k.Value] = true
		if v.Kind != yaml.ScalarNode || v.Tag == "!!null" || v.Value == "" {
			at(v, "label %s: want an operand, like arg2", k.Value)
			continue
		}
		idx, err := resolve(v.Value)
		if err != nil {
			at(v, "label %s: %v", k.Value, err)
			continue
		}
		out = append(out, Label{Name: k.Value, Operand: idx, OperandName: v.Value})
	}
	return out, errs
}

// DecodeLabelCap decodes label_cap: 1 to MaxLabelCap distinct values.
func DecodeLabelCap(file string, n *yaml.Node) (int, error) {
	v, err := strconv.ParseInt(n.Value, 0, 64)
	if n.Kind != yaml.ScalarNode || n.Tag != "!!int" || err != nil || v < 1 || v > MaxLabelCap {
		return 0, fmt.Errorf("%s:%d:%d: label_cap must be an integer from 1 to %d (distinct values kept per label; later ones are keyed \"other\")", file, n.Line, n.Column, MaxLabelCap)
	}
	return int(v), nil
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
