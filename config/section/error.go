package section

import (
	"errors"
	"fmt"
	"sort"
	"strings"

	"gopkg.in/yaml.v3"
)

// A Pos is a place in a file: 1-based line and column, 0 when unknown.
type Pos struct {
	File      string
	Line, Col int
}

// At is the position of node n in file.
func At(file string, n *yaml.Node) Pos {
	if n == nil {
		return Pos{File: file}
	}
	return Pos{File: file, Line: n.Line, Col: n.Column}
}

// String renders p as "file:line:col", or as much of it as is known.
func (p Pos) String() string {
	switch {
	case p.Line > 0 && p.Col > 0:
		return fmt.Sprintf("%s:%d:%d", p.File, p.Line, p.Col)
	case p.Line > 0:
		return fmt.Sprintf("%s:%d", p.File, p.Line)
	}
	return p.File
}

// An Error is one problem in a configuration, where it is known: a
// position in the configuration file or in a file it names, or, with an
// empty File, a command-line flag (the flag's name then starts Msg).
type Error struct {
	File      string
	Line, Col int // 1-based; 0 when unknown
	Msg       string
	// Excerpt, when set, is the text the error points into, with a caret
	// under the offending byte, on lines of its own after the message
	// (an error: predicate, say).
	Excerpt string
}

// Errorf returns an error at node n of file.
func Errorf(file string, n *yaml.Node, format string, a ...any) *Error {
	p := At(file, n)
	return &Error{File: p.File, Line: p.Line, Col: p.Col, Msg: fmt.Sprintf(format, a...)}
}

// Pos is where the error is.
func (e *Error) Pos() Pos { return Pos{File: e.File, Line: e.Line, Col: e.Col} }

func (e *Error) Error() string {
	var s string
	if e.File == "" {
		s = e.Msg
	} else {
		s = e.Pos().String() + ": " + e.Msg
	}
	if e.Excerpt != "" {
		s += "\n" + e.Excerpt
	}
	return s
}

// ErrorList is every problem found in a configuration, the way a compiler
// reports them: a user fixes the file in one pass.
type ErrorList []*Error

func (l ErrorList) Error() string {
	var b strings.Builder
	for i, e := range l {
		if i > 0 {
			b.WriteByte('\n')
		}
		b.WriteString(e.Error())
	}
	return b.String()
}

// Unwrap lets errors.As find the individual errors.
func (l ErrorList) Unwrap() []error {
	out := make([]error, len(l))
	for i, e := range l {
		out[i] = e
	}
	return out
}

// Sorted returns the errors in report order: those of file (the
// configuration file) first, by position, then those of the files it names
// in the order they were first reported, each by position, then the
// command line's.
func (l ErrorList) Sorted(file string) ErrorList {
	order := map[string]int{file: 0}
	for _, e := range l {
		if _, ok := order[e.File]; !ok && e.File != "" {
			order[e.File] = len(order)
		}
	}
	order[""] = len(order)
	out := append(ErrorList(nil), l...)
	sort.SliceStable(out, func(i, j int) bool {
		a, b := out[i], out[j]
		if oa, ob := order[a.File], order[b.File]; oa != ob {
			return oa < ob
		}
		if a.Line != b.Line {
			return a.Line < b.Line
		}
		return a.Col < b.Col
	})
	return out
}

// Flatten takes err apart into Errors: an *Error, an ErrorList, and
// errors joined with errors.Join, each in order; any other error becomes
// an Error of file without a position.
func Flatten(file string, err error) ErrorList {
	if err == nil {
		return nil
	}
	var e *Error
	if errors.As(err, &e) && error(e) == err {
		return ErrorList{e}
	}
	if list, ok := err.(interface{ Unwrap() []error }); ok {
		var out ErrorList
		for _, x := range list.Unwrap() {
			out = append(out, Flatten(file, x)...)
		}
		return out
	}
	return ErrorList{{File: file, Msg: err.Error()}}
}

// MarshalText renders p as String does, so that logs and JSON show
// "file:line:col".
func (p Pos) MarshalText() ([]byte, error) { return []byte(p.String()), nil }
