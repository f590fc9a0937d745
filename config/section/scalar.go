package section

import (
	"strings"

	"gopkg.in/yaml.v3"
)

// ScalarPos returns the line and column of byte off of scalar node n's
// value in its file: past the opening quote of a quoted scalar, on the
// line it is on in a block scalar (column 0: the block's indentation is
// not known). Escapes in a double-quoted scalar are not accounted for.
func ScalarPos(n *yaml.Node, off int) (line, col int) {
	line, col = n.Line, n.Column
	switch n.Style {
	case yaml.DoubleQuotedStyle, yaml.SingleQuotedStyle:
		col++
	case yaml.LiteralStyle, yaml.FoldedStyle:
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

// Caret returns the line of text that byte off is in and a caret under
// that byte, each line starting with indent:
//
//	arg2 => 500
//	     ^
func Caret(text string, off int, indent string) string {
	line := text
	// One line of the text: the one the offset is in.
	if i := strings.LastIndexByte(line[:min(off, len(line))], '\n'); i >= 0 {
		line, off = line[i+1:], off-i-1
	}
	if i := strings.IndexByte(line, '\n'); i >= 0 {
		line = line[:i]
	}
	pad := strings.Map(func(r rune) rune {
		if r == '\t' {
			return '\t'
		}
		return ' '
	}, line[:min(off, len(line))])
	return indent + line + "\n" + indent + pad + "^"
}

// ErrorInScalar records an error at byte off of scalar n's value, with the
// value's line and a caret under that byte as its excerpt.
func (d *Decoder) ErrorInScalar(n *yaml.Node, off int, msg string) *Error {
	line, col := ScalarPos(n, off)
	e := &Error{File: d.File, Line: line, Col: col, Msg: msg, Excerpt: Caret(n.Value, off, "\t")}
	d.errs = append(d.errs, e)
	return e
}
