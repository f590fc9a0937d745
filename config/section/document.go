package section

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"strings"

	"gopkg.in/yaml.v3"
)

// Limits on a configuration file, checked before anything is decoded so
// that a hostile or broken file (an alias bomb, a million nested
// brackets) fails fast.
const (
	MaxFileBytes = 8 << 20 // 8 MiB
	maxDepth     = 64      // nesting levels, aliases followed
	maxNodes     = 1 << 20 // nodes visited, aliases expanded each time
)

// ParseDocument reads data, the content of file, as one YAML document and
// returns its top node, aliases resolved; nil when the document is empty
// (nothing, only comments, or null). A file larger than MaxFileBytes, a
// syntax error (at the line that breaks the document), a second document,
// an alias to an unknown anchor, and a document deeper than 64 levels or
// larger than a million nodes once its aliases are expanded are errors.
func ParseDocument(file string, data []byte) (*yaml.Node, *Error) {
	if len(data) > MaxFileBytes {
		return nil, &Error{File: file, Msg: fmt.Sprintf("file is larger than %d bytes", MaxFileBytes)}
	}
	var doc yaml.Node
	dec := yaml.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&doc); err != nil && !errors.Is(err, io.EOF) {
		return nil, yamlSyntaxError(file, data, err)
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); err == nil {
		return nil, &Error{File: file, Line: extra.Line, Col: extra.Column, Msg: "more than one YAML document: a rule file is one document"}
	} else if !errors.Is(err, io.EOF) {
		return nil, yamlError(file, err)
	}
	if doc.Kind == 0 || len(doc.Content) == 0 {
		return nil, nil
	}
	if err := CheckTree(file, &doc); err != nil {
		return nil, err
	}
	root := Resolve(doc.Content[0])
	if IsNull(root) {
		return nil, nil
	}
	return root, nil
}

// CheckTree walks a document, expanding aliases, and fails once it is
// deeper than 64 levels or bigger than a million nodes: an alias bomb (each
// level referring to the previous one several times) reaches the node
// budget after visiting at most that many nodes, however large its
// expansion.
func CheckTree(file string, root *yaml.Node) *Error {
	visited := 0
	var walk func(n *yaml.Node, depth int) *Error
	walk = func(n *yaml.Node, depth int) *Error {
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

// bisectMaxBytes bounds the files whose syntax errors are located by
// bisection (configuration files are far smaller).
const bisectMaxBytes = 256 << 10

// yamlSyntaxError reports a YAML syntax error at the line where it is. For
// errors inside a block, yaml.v3 names the line where the block starts
// (and counts it from 0); the line that breaks the document is the last
// line of the shortest prefix that fails with the same message, found by
// bisection. When no prefix reproduces the message, yaml.v3's line stands.
func yamlSyntaxError(file string, data []byte, err error) *Error {
	e := yamlError(file, err)
	if len(data) > bisectMaxBytes {
		return e // bisection re-parses up to log2(lines) prefixes: bound it
	}
	lines := bytes.SplitAfter(data, []byte("\n"))
	if len(lines) < 2 {
		return e
	}
	fails := func(n int) (*Error, bool) {
		var doc yaml.Node
		perr := yaml.Unmarshal(bytes.Join(lines[:n], nil), &doc)
		if perr == nil {
			return nil, false
		}
		return yamlError(file, perr), true
	}
	lo, hi := 0, len(lines) // lines[:lo] parses (lo = 0: empty); lines[:hi] fails
	for hi-lo > 1 {
		mid := (lo + hi) / 2
		if _, bad := fails(mid); bad {
			hi = mid
		} else {
			lo = mid
		}
	}
	if pe, bad := fails(hi); bad && pe.Msg == e.Msg {
		e.Line = hi
	}
	return e
}

// yamlError turns a yaml.v3 syntax error ("yaml: line 3: ...") into an
// Error with the line number.
func yamlError(file string, err error) *Error {
	msg := err.Error()
	msg = strings.TrimPrefix(msg, "yaml: ")
	e := &Error{File: file}
	var line int
	if n, _ := fmt.Sscanf(msg, "line %d:", &line); n == 1 {
		e.Line = line
		msg = strings.TrimSpace(msg[strings.Index(msg, ":")+1:])
	}
	e.Msg = "bad YAML: " + msg
	return e
}
