package policy

import (
	"context"

	"github.com/open-policy-agent/opa/v1/ast"
	"github.com/open-policy-agent/opa/v1/topdown"
)

// foldable are the arithmetic built-ins foldConstants evaluates once, at
// load, when every operand is a number literal: a threshold written as
// 5 / 100 is otherwise divided again for every series the rule looks at
// (OPA does not fold constants; at 1000 matching series per policy the
// divisions were a tenth of the policy's evaluation). Each is deterministic,
// needs no evaluation context and builds one number.
var foldable = map[string]bool{
	ast.Plus.Name:     true,
	ast.Minus.Name:    true,
	ast.Multiply.Name: true,
	ast.Divide.Name:   true,
	ast.Rem.Name:      true,
}

// foldConstants replaces, in place, each call of a foldable built-in whose
// operands are number literals (or such calls, folded first) with the
// number OPA's own built-in returns for it: the value the evaluation would
// compute, every time, is computed once. A call the built-in refuses
// (division by zero, rem of non-integers) is left as it is, so its error
// or undefinedness at run time does not change. Nothing is folded in a
// module that defines a rule or function with a foldable built-in's name,
// which a call could mean instead.
func foldConstants(mod *ast.Module) {
	if noFold {
		return
	}
	for _, imp := range mod.Imports {
		if foldable[imp.Alias.String()] {
			return
		}
	}
	for _, r := range mod.Rules {
		if foldable[r.Head.Name.String()] || (len(r.Head.Reference) > 0 && foldable[r.Head.Reference[0].Value.String()]) {
			return
		}
	}
	ast.WalkTerms(mod, func(t *ast.Term) bool {
		if _, ok := t.Value.(ast.Call); ok {
			foldTerm(t)
		}
		return false
	})
}

// noFold turns folding off, for tests that compare folded policies with
// the same policies as written.
var noFold bool

// foldTerm folds t when it is a foldable call of numbers, after folding
// its operands; it reports whether t is now a number.
func foldTerm(t *ast.Term) bool {
	switch v := t.Value.(type) {
	case ast.Number:
		return true
	case ast.Call:
		if len(v) < 2 {
			return false
		}
		ref, ok := v[0].Value.(ast.Ref)
		if !ok || !foldable[ref.String()] {
			// Fold inside an unfoldable call's operands all the same.
			for _, op := range v[1:] {
				foldTerm(op)
			}
			return false
		}
		all := true
		for _, op := range v[1:] {
			if !foldTerm(op) {
				all = false
			}
		}
		if !all {
			return false
		}
		if n, ok := evalNumber(ref.String(), v[1:]); ok {
			t.Value = n
			return true
		}
	}
	return false
}

// evalNumber calls OPA's built-in name on ops; ok is false when it fails
// or does not return exactly one number.
func evalNumber(name string, ops []*ast.Term) (ast.Number, bool) {
	f := topdown.GetBuiltin(name)
	if f == nil {
		return "", false
	}
	var out ast.Number
	var n int
	err := f(topdown.BuiltinContext{Context: context.Background()}, ops, func(r *ast.Term) error {
		n++
		out, _ = r.Value.(ast.Number)
		return nil
	})
	if err != nil || n != 1 || out == "" {
		return "", false
	}
	return out, true
}
