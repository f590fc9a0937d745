package policy

import (
	"context"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/open-policy-agent/opa/v1/ast"
	"github.com/open-policy-agent/opa/v1/rego"

	"github.com/spanwatch/spanwatch/snapshot"
)

// Most spanwatch policies walk every series and keep a few:
//
//	some s in input.series
//	s.count >= data.min_count
//	s.p99_ns > data.limit_ns
//	...
//
// OPA's evaluator spends about as long on each series it visits as on
// each it keeps, microseconds apiece, so over 10k series most of a
// policy's time goes to series its first comparisons drop. The prefilter
// runs those comparisons in Go, before OPA, and the policy's input.series
// holds only the series that pass them; OPA then checks them again, with
// the rest of the rule.
//
// It is exact, not a heuristic. A guard is taken from a rule only when:
//
//   - the rule's body (as OPA compiled it, in evaluation order) iterates
//     input.series into a variable, the index unused anywhere else;
//   - every expression between that iteration and the guard is safe: it
//     loads a field of an iterated series, a base document of the policy's
//     data files, another part of the input or a part of a value already
//     loaded, or calls a built-in function (never a rule or a user
//     function; not print or the compiler's internal ones) on variables
//     and constants. None can raise an error that stops the evaluation (a
//     built-in's error makes its expression undefined, and OPA carries
//     on; only a timeout halts it), so for a series that fails the guard,
//     the evaluation of the rule over it would only ever have reached the
//     guard and failed;
//   - the guard compares one of the series' number or string fields with
//     a constant (a literal, a data file's value, or a built-in of
//     constants such as 5 / 100) with >, >=, <, <=, ==, != or =, and Go
//     compares exactly as OPA does (same types, same number comparison).
//
// And input.series is filtered only when every use of it in the policy is
// such an iteration with at least one guard (a series passing the guards
// of any one of them is kept), input is never used whole, and no
// expression replaces input with "with". Otherwise the policy gets every
// series. Tests compare every policy's alerts with and without the
// prefilter over random snapshots (TestPrefilterEquivalent).

// need says how much of a part of the input a policy reads.
type need uint8

const (
	needNone need = iota
	needFiltered
	needAll
)

// inputNeeds is what a policy reads of input.series and input.by_span.
type inputNeeds struct {
	series need
	// iters are the guarded iterations over input.series: a series is
	// kept when it passes every guard of one of them.
	iters  [][]guard
	bySpan need
	spans  []string // by_span's constant keys, when bySpan is needFiltered
}

// filter appends the indexes of the series that pass the guards of some
// iteration. Each iteration's guards are tried most selective first, as
// measured on a sample of the series (orderGuards): a guard that almost
// every series passes (s.count >= 10) then rarely runs. Guards are pure
// and a series must pass all of them, so the order changes only the cost.
func (n *inputNeeds) filter(series []snapshot.Series, out []int32) []int32 {
	iters := make([][]*guard, len(n.iters))
	for k, gs := range n.iters {
		iters[k] = orderGuards(gs, series)
	}
	for i := range series {
		s := &series[i]
		for _, gs := range iters {
			ok := true
			for _, g := range gs {
				if !g.holds(s) {
					ok = false
					break
				}
			}
			if ok {
				out = append(out, int32(i))
				break
			}
		}
	}
	return out
}

// guardSample is how many series orderGuards tries each guard on.
const guardSample = 256

// orderGuards returns the guards, those failing the most of a sample of
// the series (evenly spread) first; ties keep the policy's order.
func orderGuards(gs []guard, series []snapshot.Series) []*guard {
	out := make([]*guard, len(gs))
	for j := range gs {
		out[j] = &gs[j]
	}
	if len(gs) < 2 || len(series) == 0 {
		return out
	}
	fails := make([]int, len(gs))
	step := max(1, len(series)/guardSample)
	for i := 0; i < len(series); i += step {
		for j := range gs {
			if !gs[j].holds(&series[i]) {
				fails[j]++
			}
		}
	}
	idx := make([]int, len(gs))
	for j := range idx {
		idx[j] = j
	}
	slices.SortStableFunc(idx, func(a, b int) int { return fails[b] - fails[a] })
	for j, k := range idx {
		out[j] = &gs[k]
	}
	return out
}

// cmpOp is a guard's comparison.
type cmpOp uint8

const (
	cmpGT cmpOp = iota
	cmpGE
	cmpLT
	cmpLE
	cmpEQ
	cmpNE
)

var cmpOps = map[string]cmpOp{
	ast.GreaterThan.Name: cmpGT, ast.GreaterThanEq.Name: cmpGE,
	ast.LessThan.Name: cmpLT, ast.LessThanEq.Name: cmpLE,
	ast.Equal.Name: cmpEQ, ast.NotEqual.Name: cmpNE,
}

// flip is the operator with its operands swapped: 3 < x is x > 3.
func (o cmpOp) flip() cmpOp {
	switch o {
	case cmpGT:
		return cmpLT
	case cmpGE:
		return cmpLE
	case cmpLT:
		return cmpGT
	case cmpLE:
		return cmpGE
	}
	return o
}

func (o cmpOp) test(c int) bool {
	switch o {
	case cmpGT:
		return c > 0
	case cmpGE:
		return c >= 0
	case cmpLT:
		return c < 0
	case cmpLE:
		return c <= 0
	case cmpEQ:
		return c == 0
	}
	return c != 0
}

// A guard is "series field OP constant".
type guard struct {
	field *seriesField
	op    cmpOp
	val   ast.Value // a Number or a String
	// For numbers: the constant as an int64 when it is one exactly, and
	// as the nearest float64 (ok false when it has none).
	isInt bool
	i     int64
	f     float64
	fok   bool
}

func newGuard(f *seriesField, op cmpOp, v ast.Value) (guard, bool) {
	g := guard{field: f, op: op, val: v}
	switch v := v.(type) {
	case ast.Number:
		if f.kind == fieldString {
			return g, false
		}
		if i, err := strconv.ParseInt(string(v), 10, 64); err == nil {
			g.isInt, g.i = true, i
		}
		if x, err := strconv.ParseFloat(string(v), 64); err == nil && !math.IsInf(x, 0) {
			g.f, g.fok = x, true
		}
	case ast.String:
		if f.kind != fieldString {
			return g, false
		}
	default:
		return g, false
	}
	return g, true
}

// holds compares the series' field with the constant as OPA would: the
// input holds the field as f.term(s), and OPA compares Numbers exactly
// (ast.NumberCompare) and Strings bytewise.
func (g *guard) holds(s *snapshot.Series) bool {
	var c int
	switch g.field.kind {
	case fieldString:
		c = strings.Compare(g.field.s(s), string(g.val.(ast.String)))
	case fieldUint:
		v := g.field.u(s)
		switch {
		case g.isInt && g.i < 0:
			c = 1
		case g.isInt && v > math.MaxInt64:
			c = 1
		case g.isInt:
			c = compareInt(int64(v), g.i)
		default:
			c = ast.Compare(g.field.term(s).Value, g.val)
		}
	case fieldFloat:
		v := g.field.f(s)
		// Rounding to the nearest float64 is monotonic, so when the field
		// and the constant round apart their exact decimal values compare
		// the same way; when they round together, ask OPA.
		if g.fok && v != g.f {
			if v < g.f {
				c = -1
			} else {
				c = 1
			}
		} else {
			c = ast.Compare(ast.FloatNumberTerm(v).Value, g.val)
		}
	}
	return g.op.test(c)
}

func compareInt(a, b int64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// analyzeInput reads a compiled module for what its rules read of input
// (see the comment at the top of this file). data is the policy's data
// files' content, for resolving data references to constants.
func analyzeInput(mod *ast.Module, data map[string]any) inputNeeds {
	n := inputNeeds{}
	a := &analysis{data: data, recognized: map[*ast.Term]bool{}, pkg: mod.Package.Path}
	all := false
	var rules []*ast.Rule
	for _, r := range mod.Rules {
		for x := r; x != nil; x = x.Else {
			rules = append(rules, x)
		}
	}
	for _, r := range rules {
		iters := a.scanBody(r)
		for _, it := range iters {
			if len(it) == 0 {
				all = true
			}
			n.iters = append(n.iters, it)
		}
	}
	spans := map[string]bool{}
	for _, r := range rules {
		ast.WalkExprs(r, func(e *ast.Expr) bool {
			for _, w := range e.With {
				if ref, ok := w.Target.Value.(ast.Ref); ok && ref.HasPrefix(ast.InputRootRef) {
					n.series, n.bySpan = needAll, needAll
				}
			}
			return false
		})
		ast.WalkTerms(r, func(t *ast.Term) bool {
			ref, ok := t.Value.(ast.Ref)
			if !ok || !ref.HasPrefix(ast.InputRootRef) {
				return false
			}
			if len(ref) == 1 {
				n.series, n.bySpan = needAll, needAll
				return false
			}
			key, ok := ref[1].Value.(ast.String)
			if !ok {
				n.series, n.bySpan = needAll, needAll
				return false
			}
			switch key {
			case "series":
				if !a.recognized[t] {
					all = true
				}
			case "by_span":
				if len(ref) >= 3 {
					if name, ok := ref[2].Value.(ast.String); ok {
						spans[string(name)] = true
						return false
					}
				}
				n.bySpan = needAll
			}
			return false
		})
	}
	switch {
	case n.series == needAll:
	case all:
		n.series = needAll
	case len(n.iters) > 0:
		n.series = needFiltered
	}
	if n.series != needFiltered {
		n.iters = nil
	}
	if n.bySpan != needAll && len(spans) > 0 {
		n.bySpan = needFiltered
		for s := range spans {
			n.spans = append(n.spans, s)
		}
	}
	return n
}

type analysis struct {
	data       map[string]any
	pkg        ast.Ref
	recognized map[*ast.Term]bool // the input.series refs of guarded iterations
}

// binding is what the scan knows a variable holds.
type binding struct {
	field *seriesField // a field of the series iterated into iter
	iter  ast.Var
	val   ast.Value // a constant
}

// scanBody finds a rule's iterations over input.series and the guards on
// each, and records the iterations' refs as recognized. Each returned
// slice holds one iteration's guards.
func (a *analysis) scanBody(r *ast.Rule) [][]guard {
	bound := map[ast.Var]*binding{}
	for _, arg := range r.Head.Args {
		ast.WalkVars(arg, func(v ast.Var) bool { bound[v] = &binding{}; return false })
	}
	iters := map[ast.Var]int{}
	var out [][]guard
	seen := false // an iteration over input.series has been seen
	for _, e := range r.Body {
		if len(e.With) > 0 || e.Negated {
			if seen {
				break
			}
			markVars(e, bound)
			continue
		}
		if it, ref, ok := a.iteration(e, r, bound); ok {
			seen = true
			a.recognized[ref] = true
			iters[it] = len(out)
			out = append(out, nil)
			bound[it] = &binding{}
			continue
		}
		if !seen {
			markVars(e, bound)
			continue
		}
		g, safe := a.safeExpr(e, bound, iters)
		if !safe {
			break
		}
		if g != nil {
			out[iters[g.iter]] = append(out[iters[g.iter]], g.guard)
		}
	}
	return out
}

// markVars binds every variable of an expression that is not bound yet,
// to nothing known.
func markVars(e *ast.Expr, bound map[ast.Var]*binding) {
	ast.WalkVars(e, func(v ast.Var) bool {
		if v == ast.InputRootDocument.Value || v == ast.DefaultRootDocument.Value {
			return false
		}
		if _, ok := bound[v]; !ok {
			bound[v] = &binding{}
		}
		return false
	})
}

// iteration recognizes "A = input.series[I]" with A and I fresh and I used
// nowhere else in the rule.
func (a *analysis) iteration(e *ast.Expr, r *ast.Rule, bound map[ast.Var]*binding) (ast.Var, *ast.Term, bool) {
	if !e.IsEquality() || len(e.Operands()) != 2 {
		return "", nil, false
	}
	for _, pair := range [2][2]*ast.Term{{e.Operand(0), e.Operand(1)}, {e.Operand(1), e.Operand(0)}} {
		v, ok := pair[0].Value.(ast.Var)
		ref, ok2 := pair[1].Value.(ast.Ref)
		if !ok || !ok2 || len(ref) != 3 || !ref.HasPrefix(seriesRef) {
			continue
		}
		idx, ok := ref[2].Value.(ast.Var)
		if !ok || bound[v] != nil || bound[idx] != nil || v == idx {
			continue
		}
		if idx.IsWildcard() || countVar(r, idx) == 1 {
			return v, pair[1], true
		}
	}
	return "", nil, false
}

var seriesRef = ast.MustParseRef("input.series")

func countVar(r *ast.Rule, v ast.Var) int {
	n := 0
	count := func(x any) {
		ast.WalkVars(x, func(w ast.Var) bool {
			if w == v {
				n++
			}
			return false
		})
	}
	count(r.Head)
	count(r.Body)
	return n
}

type iterGuard struct {
	iter  ast.Var
	guard guard
}

// safeExpr reports whether an expression after an iteration is safe (see
// the top of this file), binding what it binds, and returns the guard it
// is, if it is one.
func (a *analysis) safeExpr(e *ast.Expr, bound map[ast.Var]*binding, iters map[ast.Var]int) (*iterGuard, bool) {
	if e.IsEquality() && len(e.Operands()) == 2 {
		l, r := e.Operand(0), e.Operand(1)
		for _, pair := range [2][2]*ast.Term{{l, r}, {r, l}} {
			v, ok := pair[0].Value.(ast.Var)
			if !ok || bound[v] != nil {
				continue
			}
			// A fresh variable bound to a load or a constant.
			b, safe := a.load(pair[1], bound, iters)
			if !safe {
				return nil, false
			}
			bound[v] = b
			return nil, true
		}
		// Both sides known: a comparison for equality.
		return a.compare(cmpEQ, l, r, bound, iters)
	}
	if !e.IsCall() {
		return nil, false
	}
	name := e.Operator().String()
	if op, ok := cmpOps[name]; ok && len(e.Operands()) == 2 {
		return a.compare(op, e.Operand(0), e.Operand(1), bound, iters)
	}
	bi, ok := ast.BuiltinMap[name]
	if !ok || bi.Decl == nil {
		return nil, false // a rule or user function: it may raise an error
	}
	if strings.HasPrefix(name, "internal.") || name == ast.Print.Name {
		// print and the compiler's internal built-ins (template strings)
		// may halt the evaluation on a bad operand.
		return nil, false
	}
	args := e.Operands()
	nargs := len(bi.Decl.FuncArgs().Args)
	if len(args) < nargs || len(args) > nargs+1 {
		return nil, false
	}
	consts := true
	for _, t := range args[:nargs] {
		switch x := t.Value.(type) {
		case ast.Var:
			b := bound[x]
			if b == nil {
				return nil, false
			}
			if b.val == nil {
				consts = false
			}
		default:
			if !isScalar(t.Value) {
				return nil, false
			}
		}
	}
	if len(args) == nargs {
		return nil, true // a test with no output
	}
	out, ok := args[nargs].Value.(ast.Var)
	if !ok || bound[out] != nil {
		return nil, false
	}
	b := &binding{}
	if consts && !bi.Nondeterministic {
		b.val = a.fold(e.Operator(), args[:nargs], bound)
	}
	bound[out] = b
	return nil, true
}

// load classifies the right side of "fresh = t".
func (a *analysis) load(t *ast.Term, bound map[ast.Var]*binding, iters map[ast.Var]int) (*binding, bool) {
	switch x := t.Value.(type) {
	case ast.Ref:
		head, ok := x[0].Value.(ast.Var)
		if !ok {
			return nil, false
		}
		if _, isIter := iters[head]; isIter {
			b := &binding{iter: head}
			if len(x) == 2 {
				if k, ok := x[1].Value.(ast.String); ok {
					b.field = fieldByName[string(k)]
				}
			}
			return b, true // a missing field is undefined, not an error
		}
		switch {
		case head == ast.InputRootDocument.Value:
			if !x.HasPrefix(seriesRef) && len(x) > 1 && x.IsGround() {
				return &binding{}, true
			}
			return nil, false
		case head == ast.DefaultRootDocument.Value:
			// Base documents only: a rule's value may raise a conflict.
			if !x.IsGround() || x.HasPrefix(a.pkg) {
				return nil, false
			}
			v, ok := a.dataValue(x)
			if !ok {
				return nil, false
			}
			return &binding{val: v}, true
		case bound[head] != nil && x[1:].IsGround():
			return &binding{}, true // into a value already bound
		}
		return nil, false
	case ast.Var:
		if b := bound[x]; b != nil {
			return b, true
		}
		return nil, false
	}
	if isScalar(t.Value) {
		return &binding{val: t.Value}, true
	}
	return nil, false
}

// compare classifies a comparison of two known operands: a guard when one
// is a series field and the other a constant, safe in any case.
func (a *analysis) compare(op cmpOp, l, r *ast.Term, bound map[ast.Var]*binding, iters map[ast.Var]int) (*iterGuard, bool) {
	lb, ok1 := a.operand(l, bound, iters)
	rb, ok2 := a.operand(r, bound, iters)
	if !ok1 || !ok2 {
		return nil, false
	}
	if rb.field != nil && lb.val != nil {
		lb, rb, op = rb, lb, op.flip()
	}
	if lb.field != nil && rb.val != nil {
		if g, ok := newGuard(lb.field, op, rb.val); ok {
			return &iterGuard{iter: lb.iter, guard: g}, true
		}
	}
	return nil, true
}

func (a *analysis) operand(t *ast.Term, bound map[ast.Var]*binding, iters map[ast.Var]int) (*binding, bool) {
	switch x := t.Value.(type) {
	case ast.Var:
		b := bound[x]
		return b, b != nil
	case ast.Ref:
		if _, ok := x[0].Value.(ast.Var); ok {
			return a.load(t, bound, iters)
		}
		return nil, false
	}
	if isScalar(t.Value) {
		return &binding{val: t.Value}, true
	}
	return nil, false
}

func isScalar(v ast.Value) bool {
	switch v.(type) {
	case ast.Number, ast.String, ast.Boolean, ast.Null:
		return true
	}
	return false
}

// dataValue resolves a ground reference into the policy's data files.
func (a *analysis) dataValue(ref ast.Ref) (ast.Value, bool) {
	var cur any = a.data
	for _, t := range ref[1:] {
		k, ok := t.Value.(ast.String)
		if !ok {
			return nil, false
		}
		m, ok := cur.(map[string]any)
		if !ok {
			return nil, false
		}
		if cur, ok = m[string(k)]; !ok {
			return nil, false
		}
	}
	v, err := ast.InterfaceToValue(cur)
	if err != nil || !isScalar(v) {
		return nil, false
	}
	return v, true
}

// fold evaluates a deterministic built-in over constants, as OPA would at
// run time; nil when it is undefined or fails.
func (a *analysis) fold(op ast.Ref, args []*ast.Term, bound map[ast.Var]*binding) ast.Value {
	terms := make([]*ast.Term, len(args))
	for i, t := range args {
		if v, ok := t.Value.(ast.Var); ok {
			terms[i] = ast.NewTerm(bound[v].val)
		} else {
			terms[i] = t
		}
	}
	x := ast.VarTerm("x")
	call := ast.CallTerm(append([]*ast.Term{ast.NewTerm(op)}, terms...)...)
	rs, err := rego.New(
		rego.ParsedQuery(ast.NewBody(ast.Equality.Expr(x, call))),
		rego.Capabilities(sandboxCaps),
		rego.StrictBuiltinErrors(true),
	).Eval(context.Background())
	if err != nil || len(rs) != 1 {
		return nil
	}
	v, err := ast.InterfaceToValue(rs[0].Bindings["x"])
	if err != nil || !isScalar(v) {
		return nil
	}
	return v
}
