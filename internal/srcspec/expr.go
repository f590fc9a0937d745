package srcspec

import (
	"fmt"
	"math/big"
	"sort"
	"strconv"
	"strings"

	"github.com/spanwatch/spanwatch/config/section"
)

// A Resolver turns an operand's name, as written in a predicate or a label
// ("arg2", "status"), into its index in the operand array the source's BPF
// program fetches (below MaxOperands). Its error says what names exist.
type Resolver func(name string) (int, error)

// A Predicate is a parsed and compiled error predicate.
type Predicate struct {
	// Text is the predicate as written.
	Text string

	terms  []cmp     // distinct comparisons, at most MaxTerms
	groups []uint8   // each a set of terms that must all hold
	refs   []Ref     // every operand written, in order
	tree   *exprNode // as parsed, for String and the tests' reference
}

// A Ref is one operand written in a predicate: its name, index and byte
// offset in the text (for errors about a call site that lacks it).
type Ref struct {
	Name    string
	Operand int
	Offset  int
}

// cmp is one comparison: operand op constant.
type cmp struct {
	operand int
	op      uint8  // opLT | opEQ | opGT bits
	value   uint64 // two's complement
	neg     bool   // value is negative
}

// Values are the operands of one probe hit or event, as the BPF side has
// them (struct src_operands).
type Values struct {
	V      [MaxOperands]uint64
	Signed uint32 // bit i: V[i] is signed
	OK     uint32 // bit i: V[i] was read
}

// Set stores operand i: its value as the BPF side has it (sign- or
// zero-extended to 64 bits) and whether it is signed.
func (v *Values) Set(i int, val uint64, signed bool) {
	v.V[i] = val
	v.OK |= 1 << i
	if signed {
		v.Signed |= 1 << i
	} else {
		v.Signed &^= 1 << i
	}
}

// holds evaluates one comparison the way bpf/source.h does.
func (c cmp) holds(v *Values) bool {
	k := c.operand
	if v.OK>>k&1 == 0 {
		return false
	}
	x := v.V[k]
	xneg := v.Signed>>k&1 == 1 && int64(x) < 0
	var order uint
	switch {
	case xneg != c.neg:
		if !xneg {
			order = 2
		}
	case x < c.value:
		order = 0
	case x == c.value:
		order = 1
	default:
		order = 2
	}
	return c.op>>order&1 == 1
}

// Eval reports whether the predicate holds for the values: the reference
// for the BPF evaluator (src_pred_holds).
func (p *Predicate) Eval(v *Values) bool {
	for _, g := range p.groups {
		all := true
		for i, c := range p.terms {
			if g>>i&1 == 1 && !c.holds(v) {
				all = false
				break
			}
		}
		if all {
			return true
		}
	}
	return false
}

// Refs returns every operand the predicate reads, as written.
func (p *Predicate) Refs() []Ref { return p.refs }

// Operands returns the distinct operand indexes the predicate reads.
func (p *Predicate) Operands() []int {
	seen := map[int]bool{}
	var out []int
	for _, r := range p.refs {
		if !seen[r.Operand] {
			seen[r.Operand] = true
			out = append(out, r.Operand)
		}
	}
	sort.Ints(out)
	return out
}

// Encode returns the predicate as bpf/source.h's struct src_pred.
func (p *Predicate) Encode() Pred {
	var out Pred
	if p == nil {
		return out
	}
	for i, c := range p.terms {
		t := &out.Terms[i]
		t.Value, t.Operand, t.Op = c.value, uint8(c.operand), c.op
		if c.neg {
			t.Neg = 1
		}
	}
	copy(out.Group[:], p.groups)
	out.NTerms, out.NGroups = uint8(len(p.terms)), uint8(len(p.groups))
	return out
}

// String renders the compiled form: groups joined by "or", comparisons
// by "and", operands by index ("$2 >= 500").
func (p *Predicate) String() string {
	if len(p.groups) == 0 {
		return "false"
	}
	var gs []string
	for _, g := range p.groups {
		var cs []string
		for i, c := range p.terms {
			if g>>i&1 == 1 {
				cs = append(cs, c.String())
			}
		}
		gs = append(gs, strings.Join(cs, " and "))
	}
	return strings.Join(gs, " or ")
}

var opNames = map[uint8]string{opLT: "<", opEQ: "==", opGT: ">", opLT | opEQ: "<=", opGT | opEQ: ">=", opLT | opGT: "!="}

func (c cmp) String() string {
	v := strconv.FormatUint(c.value, 10)
	if c.neg {
		v = strconv.FormatInt(int64(c.value), 10)
	}
	return fmt.Sprintf("$%d %s %s", c.operand, opNames[c.op], v)
}

// Nonzero is the predicate "operand != 0" (status_arg: N, a status that is
// an error when it is not zero).
func Nonzero(name string, operand int) *Predicate {
	c := cmp{operand: operand, op: opLT | opGT}
	return &Predicate{
		Text:   name + " != 0",
		terms:  []cmp{c},
		groups: []uint8{1},
		refs:   []Ref{{Name: name, Operand: operand}},
		tree:   &exprNode{kind: nodeCmp, cmp: c},
	}
}

// A SyntaxError is a predicate that does not parse or compile: Offset is
// the byte offset in the text where the problem is.
type SyntaxError struct {
	Text   string
	Offset int
	Msg    string
}

func (e *SyntaxError) Error() string { return e.Msg }

// Caret returns the text and a caret under the offending byte, each line
// starting with indent:
//
//	arg2 => 500
//	     ^
func (e *SyntaxError) Caret(indent string) string {
	return section.Caret(e.Text, e.Offset, indent)
}

// maxDepth bounds nesting (parentheses, not), so a hostile predicate
// cannot exhaust the stack.
const maxDepth = 32

// ParsePredicate parses and compiles a predicate:
//
//	pred    = or
//	or      = and { ("or" | "||") and }
//	and     = unary { ("and" | "&&") unary }
//	unary   = ("not" | "!") unary | "(" or ")" | compare
//	compare = operand [ op number ] | number op operand
//	op      = "==" | "!=" | "<" | "<=" | ">" | ">="
//
// An operand alone means "operand != 0". Numbers are decimal, 0x hex, 0o
// octal or 0b binary, optionally negative, from -2^63 to 2^64-1. The
// result has at most MaxTerms distinct comparisons in at most MaxGroups
// and-groups once "not" is pushed down and "and" distributed over "or";
// a longer one is refused. Errors are *SyntaxError.
func ParsePredicate(text string, resolve Resolver) (*Predicate, error) {
	toks, err := lex(text)
	if err != nil {
		return nil, err
	}
	p := &parser{text: text, toks: toks, resolve: resolve}
	tree, err := p.or(0)
	if err != nil {
		return nil, err
	}
	if t := p.peek(); t.kind != tokEOF {
		return nil, p.errorf(t.pos, "unexpected %s: want and, or, or the end of the predicate", t.describe())
	}
	groups, err := dnf(nnf(tree, false), text)
	if err != nil {
		return nil, err
	}
	pred := &Predicate{Text: text, refs: p.refs, tree: tree}
	if err := pred.compile(groups); err != nil {
		return nil, err
	}
	return pred, nil
}

// compile keeps each group as a set of distinct comparisons, drops
// repeated groups and groups that contain another (a or (a and b) is a),
// and numbers the comparisons the remaining groups use.
func (p *Predicate) compile(groups [][]cmp) error {
	var sets []map[cmp]bool
	for _, g := range groups {
		set := map[cmp]bool{}
		for _, c := range g {
			set[c] = true
		}
		sets = append(sets, set)
	}
	subset := func(a, b map[cmp]bool) bool {
		for c := range a {
			if !b[c] {
				return false
			}
		}
		return true
	}
	var kept [][]cmp
	for i, s := range sets {
		absorbed := false
		for j, o := range sets {
			if i != j && subset(o, s) && (len(o) < len(s) || j < i) {
				absorbed = true // a smaller, or an earlier equal, group covers it
				break
			}
		}
		if !absorbed {
			kept = append(kept, groups[i])
		}
	}
	if len(kept) > MaxGroups {
		return &SyntaxError{Text: p.Text, Msg: fmt.Sprintf("predicate too long: %d alternatives (or) once expanded, at most %d", len(kept), MaxGroups)}
	}
	index := map[cmp]int{}
	var masks []uint64
	for _, g := range kept {
		var m uint64
		for _, c := range g {
			i, ok := index[c]
			if !ok {
				i = len(p.terms)
				index[c] = i
				p.terms = append(p.terms, c)
			}
			m |= 1 << (i % 64)
		}
		masks = append(masks, m)
	}
	if len(p.terms) > MaxTerms {
		return &SyntaxError{Text: p.Text, Msg: fmt.Sprintf("predicate too long: %d distinct comparisons once expanded, at most %d", len(p.terms), MaxTerms)}
	}
	for _, m := range masks {
		p.groups = append(p.groups, uint8(m))
	}
	return nil
}

type nodeKind int

const (
	nodeCmp nodeKind = iota
	nodeAnd
	nodeOr
	nodeNot
)

type exprNode struct {
	kind nodeKind
	l, r *exprNode
	cmp  cmp
}

// nnf pushes negations down to the comparisons: not (a < 5) is a >= 5.
func nnf(n *exprNode, negate bool) *exprNode {
	switch n.kind {
	case nodeNot:
		return nnf(n.l, !negate)
	case nodeAnd, nodeOr:
		k := n.kind
		if negate {
			k = nodeAnd + nodeOr - k
		}
		return &exprNode{kind: k, l: nnf(n.l, negate), r: nnf(n.r, negate)}
	}
	c := n.cmp
	if negate {
		c.op = (opLT | opEQ | opGT) &^ c.op
	}
	return &exprNode{kind: nodeCmp, cmp: c}
}

// maxExpand bounds the groups built while distributing, so a predicate
// that would expand exponentially fails fast.
const maxExpand = 256

// dnf turns a negation-free tree into and-groups.
func dnf(n *exprNode, text string) ([][]cmp, error) {
	switch n.kind {
	case nodeCmp:
		return [][]cmp{{n.cmp}}, nil
	case nodeOr:
		l, err := dnf(n.l, text)
		if err != nil {
			return nil, err
		}
		r, err := dnf(n.r, text)
		if err != nil {
			return nil, err
		}
		if len(l)+len(r) > maxExpand {
			return nil, &SyntaxError{Text: text, Msg: fmt.Sprintf("predicate too long: more than %d alternatives once expanded, at most %d", maxExpand, MaxGroups)}
		}
		return append(l, r...), nil
	}
	l, err := dnf(n.l, text)
	if err != nil {
		return nil, err
	}
	r, err := dnf(n.r, text)
	if err != nil {
		return nil, err
	}
	if len(l)*len(r) > maxExpand {
		return nil, &SyntaxError{Text: text, Msg: fmt.Sprintf("predicate too long: more than %d alternatives once expanded, at most %d", maxExpand, MaxGroups)}
	}
	var out [][]cmp
	for _, a := range l {
		for _, b := range r {
			g := append(append([]cmp(nil), a...), b...)
			out = append(out, g)
		}
	}
	return out, nil
}

// evalTree evaluates the tree as parsed, with exact integers: the tests'
// reference for the compiled form. A comparison over an operand that was
// not read is false, and so is its negation (negate: under an odd number
// of nots).
func (n *exprNode) evalTree(v *Values, negate bool) bool {
	switch n.kind {
	case nodeNot:
		return n.l.evalTree(v, !negate)
	case nodeAnd:
		if negate {
			return n.l.evalTree(v, true) || n.r.evalTree(v, true)
		}
		return n.l.evalTree(v, false) && n.r.evalTree(v, false)
	case nodeOr:
		if negate {
			return n.l.evalTree(v, true) && n.r.evalTree(v, true)
		}
		return n.l.evalTree(v, false) || n.r.evalTree(v, false)
	}
	c := n.cmp
	if v.OK>>c.operand&1 == 0 {
		return false
	}
	x := new(big.Int).SetUint64(v.V[c.operand])
	if v.Signed>>c.operand&1 == 1 {
		x.SetInt64(int64(v.V[c.operand]))
	}
	k := new(big.Int).SetUint64(c.value)
	if c.neg {
		k.SetInt64(int64(c.value))
	}
	return (c.op>>uint(x.Cmp(k)+1)&1 == 1) != negate
}

// Token kinds.
type tokKind int

const (
	tokEOF tokKind = iota
	tokIdent
	tokNumber
	tokOp
	tokAnd
	tokOr
	tokNot
	tokLParen
	tokRParen
)

type token struct {
	kind tokKind
	text string
	pos  int
}

func (t token) describe() string {
	switch t.kind {
	case tokEOF:
		return "end of predicate"
	case tokNumber:
		return "number " + t.text
	case tokIdent:
		return "operand " + t.text
	}
	return strconv.Quote(t.text)
}

func lex(text string) ([]token, error) {
	var toks []token
	i := 0
	for i < len(text) {
		c := text[i]
		switch {
		case c == ' ' || c == '\t' || c == '\n' || c == '\r':
			i++
		case c == '(':
			toks = append(toks, token{tokLParen, "(", i})
			i++
		case c == ')':
			toks = append(toks, token{tokRParen, ")", i})
			i++
		case c == '&' || c == '|':
			if i+1 < len(text) && text[i+1] == c {
				k := tokAnd
				if c == '|' {
					k = tokOr
				}
				toks = append(toks, token{k, text[i : i+2], i})
				i += 2
				continue
			}
			return nil, &SyntaxError{Text: text, Offset: i, Msg: fmt.Sprintf("unknown operator %q: want %s%s (or %s)", c, string(c), string(c), map[byte]string{'&': "and", '|': "or"}[c])}
		case c == '=' || c == '!' || c == '<' || c == '>':
			j := i + 1
			for j < len(text) && strings.IndexByte("=!<>", text[j]) >= 0 {
				j++
			}
			op := text[i:j]
			switch op {
			case "==", "!=", "<", "<=", ">", ">=":
				toks = append(toks, token{tokOp, op, i})
			case "!":
				toks = append(toks, token{tokNot, op, i})
			case "=":
				return nil, &SyntaxError{Text: text, Offset: i, Msg: `unknown operator "=": write == to compare`}
			case "=>", "=<":
				return nil, &SyntaxError{Text: text, Offset: i, Msg: fmt.Sprintf("unknown operator %q: did you mean %s%s?", op, op[1:], "=")}
			default:
				if op[0] == '!' && len(op) > 1 && op[1] == '!' {
					toks = append(toks, token{tokNot, "!", i})
					j = i + 1
					break
				}
				return nil, &SyntaxError{Text: text, Offset: i, Msg: fmt.Sprintf("unknown operator %q: want == != < <= > >=", op)}
			}
			i = j
		case c == '-' || (c >= '0' && c <= '9'):
			j := i + 1
			for j < len(text) && isWordByte(text[j]) {
				j++
			}
			toks = append(toks, token{tokNumber, text[i:j], i})
			i = j
		case isWordByte(c):
			j := i + 1
			for j < len(text) && (isWordByte(text[j]) || text[j] == '.') {
				j++
			}
			w := text[i:j]
			switch w {
			case "and":
				toks = append(toks, token{tokAnd, w, i})
			case "or":
				toks = append(toks, token{tokOr, w, i})
			case "not":
				toks = append(toks, token{tokNot, w, i})
			default:
				toks = append(toks, token{tokIdent, w, i})
			}
			i = j
		default:
			return nil, &SyntaxError{Text: text, Offset: i, Msg: fmt.Sprintf("unexpected %q", rune(c))}
		}
	}
	return append(toks, token{tokEOF, "", len(text)}), nil
}

func isWordByte(c byte) bool {
	return c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
}

type parser struct {
	text    string
	toks    []token
	i       int
	resolve Resolver
	refs    []Ref
}

func (p *parser) peek() token { return p.toks[p.i] }

func (p *parser) next() token {
	t := p.toks[p.i]
	if t.kind != tokEOF {
		p.i++
	}
	return t
}

func (p *parser) errorf(pos int, format string, a ...any) error {
	return &SyntaxError{Text: p.text, Offset: pos, Msg: fmt.Sprintf(format, a...)}
}

func (p *parser) or(depth int) (*exprNode, error) {
	l, err := p.and(depth)
	if err != nil {
		return nil, err
	}
	for p.peek().kind == tokOr {
		p.next()
		r, err := p.and(depth)
		if err != nil {
			return nil, err
		}
		l = &exprNode{kind: nodeOr, l: l, r: r}
	}
	return l, nil
}

func (p *parser) and(depth int) (*exprNode, error) {
	l, err := p.unary(depth)
	if err != nil {
		return nil, err
	}
	for p.peek().kind == tokAnd {
		p.next()
		r, err := p.unary(depth)
		if err != nil {
			return nil, err
		}
		l = &exprNode{kind: nodeAnd, l: l, r: r}
	}
	return l, nil
}

func (p *parser) unary(depth int) (*exprNode, error) {
	t := p.peek()
	if depth > maxDepth {
		return nil, p.errorf(t.pos, "predicate nested deeper than %d levels", maxDepth)
	}
	switch t.kind {
	case tokNot:
		p.next()
		n, err := p.unary(depth + 1)
		if err != nil {
			return nil, err
		}
		return &exprNode{kind: nodeNot, l: n}, nil
	case tokLParen:
		p.next()
		n, err := p.or(depth + 1)
		if err != nil {
			return nil, err
		}
		if c := p.next(); c.kind != tokRParen {
			return nil, p.errorf(c.pos, "unexpected %s: want ) to close the ( at column %d", c.describe(), t.pos+1)
		}
		return n, nil
	}
	return p.compare()
}

func (p *parser) compare() (*exprNode, error) {
	t := p.next()
	switch t.kind {
	case tokIdent:
		operand, err := p.operand(t)
		if err != nil {
			return nil, err
		}
		if p.peek().kind != tokOp {
			// An operand alone: nonzero.
			return &exprNode{kind: nodeCmp, cmp: cmp{operand: operand, op: opLT | opGT}}, nil
		}
		op := p.next()
		n := p.next()
		if n.kind == tokIdent {
			return nil, p.errorf(n.pos, "compare %s with a number, not with operand %s", t.text, n.text)
		}
		if n.kind != tokNumber {
			return nil, p.errorf(n.pos, "unexpected %s: want a number after %s", n.describe(), op.text)
		}
		c, err := p.constant(n)
		if err != nil {
			return nil, err
		}
		c.operand, c.op = operand, opBits(op.text)
		return &exprNode{kind: nodeCmp, cmp: c}, nil
	case tokNumber:
		c, err := p.constant(t)
		if err != nil {
			return nil, err
		}
		op := p.next()
		if op.kind != tokOp {
			return nil, p.errorf(op.pos, "unexpected %s: want an operator (== != < <= > >=) after %s", op.describe(), t.text)
		}
		o := p.next()
		if o.kind != tokIdent {
			return nil, p.errorf(o.pos, "unexpected %s: compare an operand (like arg2) with a number", o.describe())
		}
		operand, err := p.operand(o)
		if err != nil {
			return nil, err
		}
		// 500 <= arg2 is arg2 >= 500: swap less and greater.
		b := opBits(op.text)
		c.operand, c.op = operand, b&opEQ|(b&opLT)<<2|(b&opGT)>>2
		return &exprNode{kind: nodeCmp, cmp: c}, nil
	case tokEOF:
		return nil, p.errorf(t.pos, "predicate ends too early: want a comparison like arg2 >= 500")
	}
	return nil, p.errorf(t.pos, "unexpected %s: want a comparison like arg2 >= 500", t.describe())
}

func opBits(op string) uint8 {
	switch op {
	case "==":
		return opEQ
	case "!=":
		return opLT | opGT
	case "<":
		return opLT
	case "<=":
		return opLT | opEQ
	case ">":
		return opGT
	}
	return opGT | opEQ // >=
}

func (p *parser) operand(t token) (int, error) {
	if p.resolve == nil {
		return 0, p.errorf(t.pos, "unknown operand %s", t.text)
	}
	i, err := p.resolve(t.text)
	if err != nil {
		return 0, p.errorf(t.pos, "%v", err)
	}
	if i < 0 || i >= MaxOperands {
		return 0, p.errorf(t.pos, "operand %s: index %d out of range", t.text, i)
	}
	p.refs = append(p.refs, Ref{Name: t.text, Operand: i, Offset: t.pos})
	return i, nil
}

// constant parses a number token: -2^63 .. 2^64-1.
func (p *parser) constant(t token) (cmp, error) {
	s := t.text
	if strings.HasPrefix(s, "-") {
		v, err := strconv.ParseInt(s, 0, 64)
		if err != nil {
			return cmp{}, p.numError(t, err)
		}
		return cmp{value: uint64(v), neg: v < 0}, nil
	}
	v, err := strconv.ParseUint(s, 0, 64)
	if err != nil {
		return cmp{}, p.numError(t, err)
	}
	return cmp{value: v}, nil
}

func (p *parser) numError(t token, err error) error {
	if ne, ok := err.(*strconv.NumError); ok && ne.Err == strconv.ErrRange {
		return p.errorf(t.pos, "number %s out of range: want -9223372036854775808 to 18446744073709551615", t.text)
	}
	return p.errorf(t.pos, "bad number %q: want decimal, 0x hex, 0o octal or 0b binary digits", t.text)
}
