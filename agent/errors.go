package agent

import (
	"errors"
	"fmt"
	"regexp"
	"sort"
	"strconv"
	"strings"

	"github.com/spanwatch/spanwatch/notify"
	"github.com/spanwatch/spanwatch/policy"
)

// An Error is one problem in a configuration, where it is known: a
// position in the configuration file or a file it names, or a command-line
// flag.
type Error struct {
	File      string // empty for a flag
	Line, Col int    // 1-based; 0 when unknown
	Msg       string
}

func (e *Error) Error() string {
	switch {
	case e.File == "":
		return e.Msg
	case e.Line > 0 && e.Col > 0:
		return fmt.Sprintf("%s:%d:%d: %s", e.File, e.Line, e.Col, e.Msg)
	case e.Line > 0:
		return fmt.Sprintf("%s:%d: %s", e.File, e.Line, e.Msg)
	}
	return fmt.Sprintf("%s: %s", e.File, e.Msg)
}

// ErrorList is every problem found in a configuration, the way a compiler
// reports them: the configuration file's in file order, then those of the
// files it names (Rego, data), then the command line's.
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

// errorCollector gathers the errors of every section of one file.
type errorCollector struct {
	file string
	errs ErrorList
}

func (c *errorCollector) at(line, col int, format string, a ...any) {
	c.errs = append(c.errs, &Error{File: c.file, Line: line, Col: col, Msg: fmt.Sprintf(format, a...)})
}

// flag records a problem with a command-line value.
func (c *errorCollector) flag(format string, a ...any) {
	c.errs = append(c.errs, &Error{Msg: fmt.Sprintf(format, a...)})
}

// positioned matches "file:line:col: message", the form of the errors of
// packages that report plain errors (internal/usdt).
var positioned = regexp.MustCompile(`^(.*?):(\d+):(\d+): (?s)(.*)$`)

// add takes the errors of another package apart into Errors: the
// positioned error types of policy and notify, lists and joins of errors,
// and plain errors that start with "file:line:col: "; other errors are
// the configuration file's, without a position.
func (c *errorCollector) add(err error) {
	if err == nil {
		return
	}
	var (
		pe *policy.Error
		ne *notify.ConfigError
		ae *Error
	)
	switch {
	case errors.As(err, &pe) && error(pe) == err:
		c.errs = append(c.errs, &Error{File: pe.File, Line: pe.Line, Col: pe.Col, Msg: pe.Msg})
		return
	case errors.As(err, &ne) && error(ne) == err:
		c.errs = append(c.errs, &Error{File: ne.File, Line: ne.Line, Col: ne.Col, Msg: ne.Msg})
		return
	case errors.As(err, &ae) && error(ae) == err:
		c.errs = append(c.errs, ae)
		return
	}
	if list, ok := err.(interface{ Unwrap() []error }); ok {
		for _, e := range list.Unwrap() {
			c.add(e)
		}
		return
	}
	msg := err.Error()
	if m := positioned.FindStringSubmatch(msg); m != nil && m[1] != "" {
		line, _ := strconv.Atoi(m[2])
		col, _ := strconv.Atoi(m[3])
		c.errs = append(c.errs, &Error{File: m[1], Line: line, Col: col, Msg: m[4]})
		return
	}
	c.errs = append(c.errs, &Error{File: c.file, Msg: msg})
}

// list returns the errors in report order, or nil.
func (c *errorCollector) list() error {
	if len(c.errs) == 0 {
		return nil
	}
	// The configuration file first, the files it names in the order they
	// were first reported, the command line last.
	order := map[string]int{c.file: 0}
	for _, e := range c.errs {
		if _, ok := order[e.File]; !ok && e.File != "" {
			order[e.File] = len(order)
		}
	}
	order[""] = len(order)
	out := append(ErrorList(nil), c.errs...)
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
