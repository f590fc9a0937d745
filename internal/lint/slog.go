package lint

import (
	"fmt"
	"go/ast"
	"go/constant"
	"go/token"
	"go/types"
	"regexp"
)

// snakeCase is a lower-case word, or words joined by single underscores;
// digits may follow the first letter ("ipv6_listen", "http2").
var snakeCase = regexp.MustCompile(`^[a-z][a-z0-9]*(_[a-z0-9]+)*$`)

// keySpellings are the keys the house spells one way everywhere, by the
// spelling it refuses: a log reader greps one key for every error.
var keySpellings = map[string]string{"err": "error"}

// IsSnakeCase reports whether s is a snake_case name.
func IsSnakeCase(s string) bool { return snakeCase.MatchString(s) }

// Problem is one call that breaks the log style.
type Problem struct {
	Pos token.Position
	Msg string
}

func (p Problem) String() string { return fmt.Sprintf("%s: %s", p.Pos, p.Msg) }

// slogCall describes where a log/slog function or *slog.Logger method takes
// its message and where its key-value arguments start (-1: it takes none,
// only slog.Attr values).
type slogCall struct {
	msg, kv int
}

var slogCalls = map[string]slogCall{
	"Debug": {0, 1}, "Info": {0, 1}, "Warn": {0, 1}, "Error": {0, 1},
	"DebugContext": {1, 2}, "InfoContext": {1, 2}, "WarnContext": {1, 2}, "ErrorContext": {1, 2},
	"Log":      {2, 3},
	"LogAttrs": {2, -1},
}

// attrFuncs are the log/slog constructors whose first argument is a key.
var attrFuncs = map[string]bool{
	"Any": true, "Bool": true, "Duration": true, "Float64": true, "Group": true,
	"Int": true, "Int64": true, "String": true, "Time": true, "Uint64": true,
}

// CheckSlog returns the calls in files (type-checked into info) that log
// through log/slog with a message that is not a snake_case string constant,
// or a key that is not a snake_case string constant, or a key the house
// spells otherwise ("err" for "error").
func CheckSlog(fset *token.FileSet, files []*ast.File, info *types.Info) []Problem {
	var probs []Problem
	report := func(n ast.Node, format string, args ...any) {
		probs = append(probs, Problem{Pos: fset.Position(n.Pos()), Msg: fmt.Sprintf(format, args...)})
	}
	for _, f := range files {
		ast.Inspect(f, func(n ast.Node) bool {
			call, ok := n.(*ast.CallExpr)
			if !ok {
				return true
			}
			fn := slogFunc(call, info)
			if fn == nil {
				return true
			}
			if attrFuncs[fn.Name()] && fn.Type().(*types.Signature).Recv() == nil {
				if len(call.Args) > 0 {
					checkKey(info, call.Args[0], report)
				}
				return true
			}
			sc, ok := slogCalls[fn.Name()]
			if !ok || len(call.Args) <= sc.msg {
				return true
			}
			msg := call.Args[sc.msg]
			s, ok := stringConst(info, msg)
			switch {
			case !ok:
				report(msg, "slog message is not a string constant: want a static snake_case event name")
			case !IsSnakeCase(s):
				report(msg, "slog message %q is not a snake_case event name", s)
			}
			if sc.kv < 0 || call.Ellipsis.IsValid() {
				return true
			}
			// Keys and values alternate; an slog.Attr stands for a pair.
			for i := sc.kv; i < len(call.Args); i++ {
				a := call.Args[i]
				if isAttr(info, a) {
					continue
				}
				checkKey(info, a, report)
				i++ // the value
			}
			return true
		})
	}
	return probs
}

func checkKey(info *types.Info, key ast.Expr, report func(ast.Node, string, ...any)) {
	s, ok := stringConst(info, key)
	switch {
	case !ok:
		report(key, "slog key is not a string constant")
	case !IsSnakeCase(s):
		report(key, "slog key %q is not snake_case", s)
	case keySpellings[s] != "":
		report(key, "slog key %q: the house spells it %q", s, keySpellings[s])
	}
}

// slogFunc returns the log/slog function or *slog.Logger method call calls,
// or nil.
func slogFunc(call *ast.CallExpr, info *types.Info) *types.Func {
	var id *ast.Ident
	switch fun := ast.Unparen(call.Fun).(type) {
	case *ast.SelectorExpr:
		id = fun.Sel
	case *ast.Ident:
		id = fun
	default:
		return nil
	}
	fn, ok := info.Uses[id].(*types.Func)
	if !ok || fn.Pkg() == nil || fn.Pkg().Path() != "log/slog" {
		return nil
	}
	return fn
}

func stringConst(info *types.Info, e ast.Expr) (string, bool) {
	tv, ok := info.Types[e]
	if !ok || tv.Value == nil || tv.Value.Kind() != constant.String {
		return "", false
	}
	return constant.StringVal(tv.Value), true
}

func isAttr(info *types.Info, e ast.Expr) bool {
	t := info.TypeOf(e)
	if t == nil {
		return false
	}
	named, ok := t.(*types.Named)
	return ok && named.Obj().Pkg() != nil && named.Obj().Pkg().Path() == "log/slog" && named.Obj().Name() == "Attr"
}
