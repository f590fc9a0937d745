package policy

import (
	"bytes"
	"context"
	"fmt"
	"math/big"
	"regexp"
	"strconv"
	"strings"
	"text/template"
	"text/template/parse"
	"unicode/utf8"

	"github.com/open-policy-agent/opa/v1/ast"
	"github.com/open-policy-agent/opa/v1/topdown"
	"github.com/open-policy-agent/opa/v1/topdown/builtins"
)

// A policy's evaluation runs in steps, between which OPA checks its
// context: the heap watch (heap.go) can stop a policy that builds a large
// value a step at a time. One builtin call is one step, though, and some
// builtins can allocate in one call far more than their operands hold:
// numbers.range(1, n) builds n numbers from two, concat and sprintf render
// a value whose parts share memory as often as they are referenced, a
// template loops. Each of those is wrapped here: before OPA's own
// implementation runs, the size of what it would build is estimated from
// the operands (cheaply, stopping once the estimate passes the bound), and
// a call that would pass the evaluation's memory bound halts the policy
// with an error wrapping ErrMemory instead.
//
// The wrappers replace the builtins in OPA's global table (the evaluator
// looks standard builtins up there, not in a query's own functions); they
// act only in an evaluation whose context carries a bound (WithMemoryLimit),
// so other uses of OPA in the process are unchanged.

// memLimitKey holds an evaluation's memory bound in its context.
type memLimitKey struct{}

// WithMemoryLimit returns ctx carrying a memory bound for the builtins of
// the policies evaluated under it.
func WithMemoryLimit(ctx context.Context, bytes int64) context.Context {
	return context.WithValue(ctx, memLimitKey{}, bytes)
}

func memoryLimit(ctx context.Context) (int64, bool) {
	if ctx == nil {
		return 0, false
	}
	b, ok := ctx.Value(memLimitKey{}).(int64)
	return b, ok && b > 0
}

// What OPA's builtins allocate per element they build, measured on its
// evaluator (TestGuardCosts prints them and holds each estimate within a
// factor of two).
const (
	// rangeBytes: numbers.range makes a big.Int, its decimal text and a
	// term per number (206 B measured).
	rangeBytes = 200
	// partBytes: split makes a term per part; the parts share the string
	// (56 B).
	partBytes = 64
	// matchBytes: the regex builtins make a string term and index slices
	// per match (162 B).
	matchBytes = 160
	// valueBytes: json.unmarshal and yaml.unmarshal make a Go value, then
	// a term, per value (158 B for a list of numbers).
	valueBytes = 160
	// nodeBytes: the encoders convert the value to Go values first
	// (ast.JSON), a few words per node.
	nodeBytes = 64
	// leafBytes: array.flatten makes a term pointer per element (16 B
	// measured, with the array's own bookkeeping).
	leafBytes = 24
)

// A sizer estimates the bytes a builtin call would allocate, given its
// operands and the bound; ok is false when it cannot tell (an operand of
// the wrong type: OPA's builtin reports that).
type sizer func(ops []*ast.Term, limit int64) (bytes int64, ok bool)

// guards are the wrapped builtins. strings.render_template is replaced,
// not wrapped (renderTemplate).
var guards = map[string]sizer{
	"numbers.range":                    guardRange(false),
	"numbers.range_step":               guardRange(true),
	"concat":                           guardConcat,
	"replace":                          guardReplace,
	"strings.replace_n":                guardReplaceN,
	"regex.replace":                    guardRegexReplace,
	"split":                            guardSplit,
	"regex.split":                      guardRegexCount(0, 1, 0),
	"regex.find_n":                     guardRegexCount(0, 1, 2),
	"regex.find_all_string_submatch_n": guardRegexCount(0, 1, 2),
	"indexof_n":                        guardIndexOfN,
	"sprintf":                          guardSprintf,
	"json.marshal":                     guardRendered(0),
	"json.marshal_with_options":        guardMarshalOptions,
	"yaml.marshal":                     guardYAML,
	"urlquery.encode_object":           guardRendered(0),
	"internal.template_string":         guardRendered(0),
	"io.jwt.encode_sign":               guardRendered(1),
	"io.jwt.encode_sign_raw":           guardRendered(1),
	"array.flatten":                    guardFlatten,
	"json.unmarshal":                   guardUnmarshal,
	"yaml.unmarshal":                   guardUnmarshal,
}

func init() {
	for name, g := range guards {
		orig := topdown.GetBuiltin(name)
		if orig == nil || ast.BuiltinMap[name] == nil {
			panic("policy: OPA has no builtin " + name + " to guard")
		}
		// OPA hands builtins it marks as needing no context an empty one:
		// the guard needs the evaluation's.
		ast.BuiltinMap[name].CanSkipBctx = false
		topdown.RegisterBuiltinFunc(name, func(bctx topdown.BuiltinContext, ops []*ast.Term, iter func(*ast.Term) error) error {
			if limit, ok := memoryLimit(bctx.Context); ok {
				if b, ok := g(ops, limit); ok && b > limit {
					return memoryHalt(bctx, name, b, limit)
				}
			}
			return orig(bctx, ops, iter)
		})
	}
	if topdown.GetBuiltin(ast.RenderTemplate.Name) == nil {
		panic("policy: OPA has no builtin " + ast.RenderTemplate.Name)
	}
	ast.BuiltinMap[ast.RenderTemplate.Name].CanSkipBctx = false
	topdown.RegisterBuiltinFunc(ast.RenderTemplate.Name, renderTemplate)
}

// memoryHalt stops the evaluation: the error says which call, what it
// would have built and the bound.
func memoryHalt(bctx topdown.BuiltinContext, name string, bytes, limit int64) error {
	msg := fmt.Sprintf("%s would build at least %s, past the policy memory bound of %s (policy_limits.memory)", name, approx(bytes), FormatSize(limit))
	return topdown.Halt{Err: (&topdown.Error{Code: topdown.BuiltinErr, Message: msg, Location: bctx.Location}).Wrap(ErrMemory)}
}

// approx renders an estimate (a lower bound when it stopped at the
// bound).
func approx(b int64) string {
	switch {
	case b >= 1<<30:
		return fmt.Sprintf("%.1f GiB", float64(b)/(1<<30))
	case b >= 1<<20:
		return fmt.Sprintf("%.0f MiB", float64(b)/(1<<20))
	}
	return fmt.Sprintf("%d KiB", b>>10)
}

// sat multiplies without overflow, saturating at 1<<62.
func sat(a, b int64) int64 {
	const top = 1 << 62
	if a <= 0 || b <= 0 {
		return 0
	}
	if a > top/b {
		return top
	}
	return a * b
}

// guardRange: numbers.range(a, b) and numbers.range_step(a, b, step) build
// |b-a|/step+1 numbers.
func guardRange(stepped bool) sizer {
	return func(ops []*ast.Term, _ int64) (int64, bool) {
		num := func(t *ast.Term) (*big.Int, bool) {
			n, ok := t.Value.(ast.Number)
			if !ok {
				return nil, false
			}
			i, ok := new(big.Int).SetString(string(n), 10)
			return i, ok
		}
		a, ok1 := num(ops[0])
		b, ok2 := num(ops[1])
		if !ok1 || !ok2 {
			return 0, false
		}
		n := new(big.Int).Abs(new(big.Int).Sub(b, a))
		if stepped {
			step, ok := num(ops[2])
			if !ok || step.Sign() <= 0 {
				return 0, false
			}
			n.Quo(n, step)
		}
		n.Add(n, big.NewInt(1))
		if !n.IsInt64() {
			return 1 << 62, true
		}
		return sat(n.Int64(), rangeBytes), true
	}
}

// strs yields the strings of an array or set operand.
func strs(t *ast.Term, f func(string) bool) bool {
	each := func(e *ast.Term) bool {
		s, ok := e.Value.(ast.String)
		return ok && f(string(s))
	}
	switch v := t.Value.(type) {
	case *ast.Array:
		for i := range v.Len() {
			if !each(v.Elem(i)) {
				return false
			}
		}
		return true
	case ast.Set:
		ok := true
		v.Until(func(e *ast.Term) bool { ok = each(e); return !ok })
		return ok
	}
	return false
}

// guardConcat: concat(sep, parts) writes every part and a separator
// between two, however often a part is referenced.
func guardConcat(ops []*ast.Term, limit int64) (int64, bool) {
	sep, ok := ops[0].Value.(ast.String)
	if !ok {
		return 0, false
	}
	var total, n int64
	strs(ops[1], func(s string) bool {
		total += int64(len(s)) + int64(len(sep))
		n++
		return total <= limit
	})
	return total, true
}

// count is strings.Count, which counts rune boundaries for an empty sub.
func count(s, sub string) int64 {
	if sub == "" {
		return int64(utf8.RuneCountInString(s)) + 1
	}
	return int64(strings.Count(s, sub))
}

// guardReplace: replace(s, old, new) grows s by len(new)-len(old) at
// each match; an empty old matches between every two runes.
func guardReplace(ops []*ast.Term, _ int64) (int64, bool) {
	s, ok1 := ops[0].Value.(ast.String)
	old, ok2 := ops[1].Value.(ast.String)
	nw, ok3 := ops[2].Value.(ast.String)
	if !ok1 || !ok2 || !ok3 {
		return 0, false
	}
	grow := int64(len(nw) - len(old))
	if grow <= 0 {
		return int64(len(s)), true
	}
	return int64(len(s)) + sat(count(string(s), string(old)), grow), true
}

// guardReplaceN: strings.replace_n({old: new, ...}, s).
func guardReplaceN(ops []*ast.Term, _ int64) (int64, bool) {
	pats, ok1 := ops[0].Value.(ast.Object)
	s, ok2 := ops[1].Value.(ast.String)
	if !ok1 || !ok2 {
		return 0, false
	}
	total := int64(len(s))
	ok := true
	pats.Foreach(func(k, v *ast.Term) {
		old, ok1 := k.Value.(ast.String)
		nw, ok2 := v.Value.(ast.String)
		if !ok1 || !ok2 {
			ok = false
			return
		}
		if grow := int64(len(nw)); grow > 0 {
			total += sat(count(string(s), string(old)), grow)
		}
	})
	return total, ok
}

// matches counts the matches of pattern in s, at most max of them.
func matches(pattern, s string, max int64) (int64, bool) {
	re, err := regexp.Compile(pattern)
	if err != nil {
		return 0, false
	}
	n := int64(len(re.FindAllStringIndex(s, int(min(max, 1<<30)))))
	return n, true
}

// guardRegexReplace: regex.replace(s, pattern, value) writes value for
// each match, each $ in it expanding to (at most) all of s.
func guardRegexReplace(ops []*ast.Term, limit int64) (int64, bool) {
	s, ok1 := ops[0].Value.(ast.String)
	pat, ok2 := ops[1].Value.(ast.String)
	val, ok3 := ops[2].Value.(ast.String)
	if !ok1 || !ok2 || !ok3 {
		return 0, false
	}
	per := int64(len(val)) + sat(int64(strings.Count(string(val), "$")), int64(len(s)))
	est := int64(len(s)) + sat(int64(len(s))+1, per)
	if est <= limit || per == 0 {
		return est, true
	}
	// The pessimistic bound is past the limit: count the matches, as far
	// as the limit allows.
	n, ok := matches(string(pat), string(s), limit/per+1)
	if !ok {
		return 0, false
	}
	return int64(len(s)) + sat(n, per), true
}

// guardSplit: split(s, sep) makes a string per part.
func guardSplit(ops []*ast.Term, _ int64) (int64, bool) {
	s, ok1 := ops[0].Value.(ast.String)
	sep, ok2 := ops[1].Value.(ast.String)
	if !ok1 || !ok2 {
		return 0, false
	}
	return sat(count(string(s), string(sep))+1, partBytes), true
}

// guardRegexCount guards the regex builtins that make a term per match:
// the pattern and the string are operands pat and str; the count limit, if
// any, operand n (n == str: none).
func guardRegexCount(pat, str, n int) sizer {
	return func(ops []*ast.Term, limit int64) (int64, bool) {
		p, ok1 := ops[pat].Value.(ast.String)
		s, ok2 := ops[str].Value.(ast.String)
		if !ok1 || !ok2 {
			return 0, false
		}
		most := int64(len(s)) + 1
		if n != str {
			if k, ok := ops[n].Value.(ast.Number); ok {
				if x, ok := k.Int64(); ok && x >= 0 {
					most = min(most, x)
				}
			}
		}
		re, err := regexp.Compile(string(p))
		if err != nil {
			return 0, false
		}
		per := sat(int64(re.NumSubexp())+1, matchBytes)
		if sat(most, per) <= limit {
			return sat(most, per), true
		}
		m, ok := matches(string(p), string(s), limit/per+1)
		if !ok {
			return 0, false
		}
		return sat(m+1, per), true
	}
}

// guardIndexOfN: indexof_n(s, sub) makes a number per match.
func guardIndexOfN(ops []*ast.Term, _ int64) (int64, bool) {
	s, ok1 := ops[0].Value.(ast.String)
	sub, ok2 := ops[1].Value.(ast.String)
	if !ok1 || !ok2 {
		return 0, false
	}
	return sat(count(string(s), string(sub)), partBytes), true
}

// guardSprintf: sprintf(format, values) writes the format, each verb's
// width and precision, and each value (rendered, references expanded),
// up to six times over for %q's escapes.
func guardSprintf(ops []*ast.Term, limit int64) (int64, bool) {
	f, ok1 := ops[0].Value.(ast.String)
	vals, ok2 := ops[1].Value.(*ast.Array)
	if !ok1 || !ok2 {
		return 0, false
	}
	total := int64(len(f))
	factor := int64(1)
	format := string(f)
	for i := 0; i < len(format); i++ {
		if format[i] != '%' {
			continue
		}
		i++
		for i < len(format) && strings.IndexByte("+-# 0[]123456789.*", format[i]) >= 0 {
			j := i
			for j < len(format) && format[j] >= '0' && format[j] <= '9' {
				j++
			}
			if j > i {
				// fmt ignores a width or precision over 1e6.
				if w, err := strconv.ParseInt(format[i:j], 10, 64); err == nil && w <= 1e6 {
					total += w
				}
				i = j
				continue
			}
			if format[i] == '*' {
				total += 1e6 // taken from an argument, at most 1e6
			}
			i++
		}
		if i < len(format) {
			switch format[i] {
			case 'q':
				factor = max(factor, 6)
			case 'x', 'X', 'b', 'U':
				factor = max(factor, 4)
			}
		}
		if total > limit {
			return total, true
		}
	}
	for i := range vals.Len() {
		b, nodes := rendered(vals.Elem(i), limit, nil)
		total += sat(b+nodes, factor)
		if total > limit {
			break
		}
	}
	return total, true
}

// guardRendered guards a builtin that renders operand i: its text plus a
// Go value per node (ast.JSON) on the way.
func guardRendered(i int) sizer {
	return func(ops []*ast.Term, limit int64) (int64, bool) {
		b, nodes := rendered(ops[i], limit, nil)
		return b + sat(nodes, nodeBytes), true
	}
}

// guardMarshalOptions: json.marshal_with_options(x, {prefix, indent}):
// a line per node, each with the prefix and an indent per depth.
func guardMarshalOptions(ops []*ast.Term, limit int64) (int64, bool) {
	indent, prefix := int64(1), int64(0) // a tab by default
	if o, ok := ops[1].Value.(ast.Object); ok {
		if v := o.Get(ast.StringTerm("indent")); v != nil {
			if s, ok := v.Value.(ast.String); ok {
				indent = int64(len(s))
			}
		}
		if v := o.Get(ast.StringTerm("prefix")); v != nil {
			if s, ok := v.Value.(ast.String); ok {
				prefix = int64(len(s))
			}
		}
	}
	b, nodes := rendered(ops[0], limit, func(depth int64) int64 { return 1 + prefix + sat(depth, indent) })
	return b + sat(nodes, nodeBytes), true
}

// guardYAML: yaml.marshal(x) writes a line per node, indented two spaces
// per depth, and may quote and escape a string.
func guardYAML(ops []*ast.Term, limit int64) (int64, bool) {
	b, nodes := rendered(ops[0], limit, func(depth int64) int64 { return 4 + 2*depth })
	return b + sat(nodes, nodeBytes), true
}

// guardFlatten: array.flatten(a) makes an element per element of each of
// a's arrays (one level down), however often an array is referenced.
func guardFlatten(ops []*ast.Term, _ int64) (int64, bool) {
	a, ok := ops[0].Value.(*ast.Array)
	if !ok {
		return 0, false
	}
	var n int64
	for i := range a.Len() {
		if nested, ok := a.Elem(i).Value.(*ast.Array); ok {
			n += int64(nested.Len())
		} else {
			n++
		}
	}
	return sat(n, leafBytes), true
}

// guardUnmarshal: json.unmarshal(s) and yaml.unmarshal(s) make a term per
// value of the document; a value starts at most at each separator.
func guardUnmarshal(ops []*ast.Term, _ int64) (int64, bool) {
	s, ok := ops[0].Value.(ast.String)
	if !ok {
		return 0, false
	}
	var n int64 = 1
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case ',', ':', '[', '{', '\n', '-', '*':
			n++
		}
	}
	return int64(len(s)) + sat(n, valueBytes), true
}

// rendered estimates the bytes of t written out as JSON (HTML-escaped, as
// encoding/json does), each reference to a shared value written in full,
// plus perNode(depth) for each value when given (a pretty printer's
// newline and indentation); and counts the values. It stops once the bytes
// pass limit: each value adds at least one byte, so it visits at most
// limit values, however deeply the term nests its references.
func rendered(t *ast.Term, limit int64, perNode func(depth int64) int64) (bytes, nodes int64) {
	var walk func(t *ast.Term, depth int64) bool
	walk = func(t *ast.Term, depth int64) bool {
		nodes++
		if perNode != nil {
			bytes += perNode(depth)
		}
		switch v := t.Value.(type) {
		case ast.String:
			bytes += stringBytes(string(v))
		case ast.Number:
			bytes += int64(len(v))
		case ast.Boolean:
			bytes += 5
		case ast.Null:
			bytes += 4
		case *ast.Array:
			bytes += 2
			for i := range v.Len() {
				if !walk(v.Elem(i), depth+1) {
					return false
				}
				bytes++
			}
		case ast.Set:
			bytes += 2
			ok := true
			v.Until(func(e *ast.Term) bool {
				ok = walk(e, depth+1)
				bytes++
				return !ok
			})
			if !ok {
				return false
			}
		case ast.Object:
			bytes += 2
			ok := true
			v.Until(func(k, e *ast.Term) bool {
				ok = walk(k, depth+1) && walk(e, depth+1)
				bytes += 2
				return !ok
			})
			if !ok {
				return false
			}
		default:
			bytes += int64(len(t.String()))
		}
		return bytes <= limit
	}
	walk(t, 0)
	return bytes, nodes
}

// stringBytes is the length of s as a JSON string: its quotes, and six
// bytes for each byte written as \u00XX (controls, <, >, &, and each byte
// of invalid UTF-8).
func stringBytes(s string) int64 {
	n := int64(len(s)) + 2
	valid := utf8.ValidString(s)
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < 0x20 || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' || (c >= 0x80 && !valid) {
			n += 5
		}
	}
	return n
}

// renderTemplate is strings.render_template(template, vars) bounded: the
// variables are converted only when their size fits the bound, a template
// that calls templates ({{template}}, {{block}}, which can recurse without
// end, in one step no limit could stop) is refused, and the output stops
// at the bound. It returns what OPA's own does.
func renderTemplate(bctx topdown.BuiltinContext, ops []*ast.Term, iter func(*ast.Term) error) error {
	src, err := builtins.StringOperand(ops[0].Value, 1)
	if err != nil {
		return err
	}
	vars, err := builtins.ObjectOperand(ops[1].Value, 2)
	if err != nil {
		return err
	}
	limit, bounded := memoryLimit(bctx.Context)
	if bounded {
		if b, nodes := rendered(ops[1], limit, nil); b+sat(nodes, nodeBytes) > limit {
			return memoryHalt(bctx, ast.RenderTemplate.Name, b+sat(nodes, nodeBytes), limit)
		}
	}
	var goVars map[string]any
	if err := ast.As(vars, &goVars); err != nil {
		return err
	}
	tmpl, err := template.New("template").Parse(string(src))
	if err != nil {
		return err
	}
	if bounded {
		for _, t := range tmpl.Templates() {
			if t.Name() != "template" || callsTemplate(t.Tree.Root) {
				return topdown.Halt{Err: (&topdown.Error{Code: topdown.BuiltinErr, Location: bctx.Location,
					Message: ast.RenderTemplate.Name + ": {{define}}, {{template}} and {{block}} are refused in spanwatch policies: a template that calls itself runs without end in one step no limit can stop"}).Wrap(ErrMemory)}
			}
		}
	}
	// The buffer doubles as it grows: half the bound in text is a bound's
	// worth of buffers.
	out := &boundedBuffer{limit: limit / 2, bounded: bounded}
	if err := tmpl.Execute(out, goVars); err != nil {
		if out.over {
			return memoryHalt(bctx, ast.RenderTemplate.Name, 2*out.limit+1, limit)
		}
		return err
	}
	return iter(ast.StringTerm(strings.ReplaceAll(out.String(), "<no value>", "<undefined>")))
}

// callsTemplate reports whether a template's tree calls a template.
func callsTemplate(n parse.Node) bool {
	switch n := n.(type) {
	case *parse.TemplateNode:
		return true
	case *parse.ListNode:
		if n == nil {
			return false
		}
		for _, c := range n.Nodes {
			if callsTemplate(c) {
				return true
			}
		}
	case *parse.IfNode:
		return callsTemplate(n.List) || callsTemplate(n.ElseList)
	case *parse.RangeNode:
		return callsTemplate(n.List) || callsTemplate(n.ElseList)
	case *parse.WithNode:
		return callsTemplate(n.List) || callsTemplate(n.ElseList)
	}
	return false
}

// boundedBuffer fails a write that would take it past limit.
type boundedBuffer struct {
	bytes.Buffer
	limit   int64
	bounded bool
	over    bool
}

func (b *boundedBuffer) Write(p []byte) (int, error) {
	if b.bounded && int64(b.Len()+len(p)) > b.limit {
		b.over = true
		return 0, ErrMemory
	}
	return b.Buffer.Write(p)
}
