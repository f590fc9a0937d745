package srcspec

import (
	"errors"
	"fmt"
	"math"
	"math/rand"
	"strconv"
	"strings"
	"testing"
)

// argResolver resolves arg0..arg11, as USDT sources do.
func argResolver(name string) (int, error) {
	if n, ok := strings.CutPrefix(name, "arg"); ok {
		if i, err := strconv.Atoi(n); err == nil && i >= 0 && i < 12 {
			return i, nil
		}
	}
	return 0, fmt.Errorf("unknown operand %s: want arg0 to arg11", name)
}

func TestParsePredicate(t *testing.T) {
	for _, tc := range []struct {
		text, want string
	}{
		{"arg2 >= 500", "$2 >= 500"},
		{"arg2>=500", "$2 >= 500"},
		{"500 <= arg2", "$2 >= 500"},
		{"500 < arg2", "$2 > 500"},
		{"-1 == arg0", "$0 == -1"},
		{"arg2", "$2 != 0"},
		{"!arg2", "$2 == 0"},
		{"not arg2 < 5", "$2 >= 5"},
		{"not (arg1 == 1 or arg2 == 2)", "$1 != 1 and $2 != 2"},
		{"not (arg1 == 1 and arg2 == 2)", "$1 != 1 or $2 != 2"},
		{"arg2 >= 500 and arg3 != 0", "$2 >= 500 and $3 != 0"},
		{"arg2 >= 500 && arg3 != 0 || arg4 < -3", "$2 >= 500 and $3 != 0 or $4 < -3"},
		{"(arg1 == 1 or arg1 == 2) and arg3 > 0x10", "$1 == 1 and $3 > 16 or $3 > 16 and $1 == 2"},
		{"arg1 == 1 or arg1 == 1 and arg2 == 2", "$1 == 1"},
		{"arg1 == 1 and arg2 == 2 or arg1 == 1", "$1 == 1"},
		{"arg1 == 1 or arg1 == 1", "$1 == 1"},
		{"arg0 == 18446744073709551615", "$0 == 18446744073709551615"},
		{"arg0 > -9223372036854775808", "$0 > -9223372036854775808"},
		{"arg0 == -0", "$0 == 0"},
		{"arg0 == 0b101 or arg0 == 0o17", "$0 == 5 or $0 == 15"},
		{"((((arg1))))", "$1 != 0"},
	} {
		p, err := ParsePredicate(tc.text, argResolver)
		if err != nil {
			t.Errorf("%q: %v", tc.text, err)
			continue
		}
		if got := p.String(); got != tc.want {
			t.Errorf("%q compiles to %q, want %q", tc.text, got, tc.want)
		}
	}
}

func TestParsePredicateErrors(t *testing.T) {
	for _, tc := range []struct {
		text   string
		offset int
		msg    string
	}{
		{"arg2 => 500", 5, `unknown operator "=>": did you mean >=?`},
		{"arg2 = 500", 5, `unknown operator "=": write == to compare`},
		{"arg2 >= 5OO", 8, `bad number "5OO"`},
		{"arg2 >= ", 8, "unexpected end of predicate: want a number after >="},
		{"arg12 > 1", 0, "unknown operand arg12: want arg0 to arg11"},
		{"status > 1", 0, "unknown operand status"},
		{"arg1 > arg2", 7, "compare arg1 with a number, not with operand arg2"},
		{"arg1 > 1 and", 12, "predicate ends too early"},
		{"arg1 > 1 arg2", 9, "unexpected operand arg2: want and, or, or the end"},
		{"(arg1 > 1", 9, "want ) to close the ( at column 1"},
		{"arg1 & 1", 5, `unknown operator '&': want && (or and)`},
		{"1 == 2", 5, "unexpected number 2: compare an operand"},
		{"arg1 > 18446744073709551616", 7, "number 18446744073709551616 out of range"},
		{"arg1 > -9223372036854775809", 7, "out of range"},
		{"arg1 $ 3", 5, `unexpected '$'`},
		{"", 0, "predicate ends too early"},
		{strings.Repeat("(", 40) + "arg1" + strings.Repeat(")", 40), 33, "nested deeper than 32"},
		{"arg0 == 1 or arg1 == 1 or arg2 == 1 or arg3 == 1 or arg4 == 1 or arg5 == 1 or arg6 == 1 or arg7 == 1 or arg8 == 1", 0, "9 alternatives (or) once expanded, at most 8"},
		{"(arg0 == 1 or arg1 == 1 or arg2 == 1) and (arg3 == 1 or arg4 == 1 or arg5 == 1)", 0, "9 alternatives"},
		{"arg0 > 1 and arg0 > 2 and arg0 > 3 and arg0 > 4 and arg0 > 5 and arg0 > 6 and arg0 > 7 and arg0 > 8 and arg0 > 9", 0, "9 distinct comparisons once expanded, at most 8"},
	} {
		_, err := ParsePredicate(tc.text, argResolver)
		var se *SyntaxError
		if !errors.As(err, &se) {
			t.Errorf("%q: error %v, want a *SyntaxError", tc.text, err)
			continue
		}
		if se.Offset != tc.offset || !strings.Contains(se.Msg, tc.msg) {
			t.Errorf("%q: error at %d %q, want at %d containing %q", tc.text, se.Offset, se.Msg, tc.offset, tc.msg)
		}
	}
}

func TestCaret(t *testing.T) {
	_, err := ParsePredicate("arg2 => 500", argResolver)
	var se *SyntaxError
	if !errors.As(err, &se) {
		t.Fatal(err)
	}
	if got, want := se.Caret("  "), "  arg2 => 500\n       ^"; got != want {
		t.Errorf("caret:\n%s\nwant:\n%s", got, want)
	}
}

// TestEvalSignedness holds comparisons against values of every sign and
// signedness at the edges of the 64-bit ranges.
func TestEvalSignedness(t *testing.T) {
	for _, tc := range []struct {
		pred   string
		val    uint64
		signed bool
		want   bool
	}{
		{"arg0 >= 500", 500, false, true},
		{"arg0 >= 500", 499, false, false},
		{"arg0 < 0", math.MaxUint64, false, false}, // unsigned: 2^64-1
		{"arg0 < 0", math.MaxUint64, true, true},   // signed: -1
		{"arg0 == -1", math.MaxUint64, true, true},
		{"arg0 == -1", math.MaxUint64, false, false},
		{"arg0 > 9223372036854775807", 1 << 63, false, true},
		{"arg0 > 9223372036854775807", 1 << 63, true, false}, // -2^63
		{"arg0 < -9223372036854775807", 1 << 63, true, true},
		{"arg0 > -5", 3, false, true},
		{"arg0 > -5", uint64(math.MaxUint64 - 5), true, false}, // -6
		{"arg0 != 0", 0, true, false},
		{"arg0 <= -6", uint64(math.MaxUint64 - 5), true, true},
	} {
		p, err := ParsePredicate(tc.pred, argResolver)
		if err != nil {
			t.Fatal(err)
		}
		var v Values
		v.Set(0, tc.val, tc.signed)
		want := tc.want
		if got := p.Eval(&v); got != want {
			t.Errorf("%s with %d (signed %v): %v, want %v", tc.pred, tc.val, tc.signed, got, want)
		}
		if got := p.tree.evalTree(&v, false); got != want {
			t.Errorf("reference: %s with %d (signed %v): %v, want %v", tc.pred, tc.val, tc.signed, got, want)
		}
	}
	// An operand that was not read fails its comparison, negated or not.
	for _, pred := range []string{"arg1 == 0", "arg1 != 0", "not arg1 == 0", "arg1 >= 0"} {
		p, _ := ParsePredicate(pred, argResolver)
		var v Values
		if p.Eval(&v) || p.tree.evalTree(&v, false) {
			t.Errorf("%s holds for an unread operand", pred)
		}
	}
}

// randomPredicate writes a random predicate of at most n comparisons over
// operands 0..3, with constants near the edges of the ranges.
func randomPredicate(rng *rand.Rand, n int) string {
	consts := []string{"0", "1", "-1", "500", "-500", "9223372036854775807", "-9223372036854775808", "18446744073709551615", "0x8000000000000000"}
	ops := []string{"==", "!=", "<", "<=", ">", ">="}
	var gen func(n, depth int) string
	gen = func(n, depth int) string {
		if n <= 1 || depth > 4 {
			c := fmt.Sprintf("arg%d %s %s", rng.Intn(4), ops[rng.Intn(len(ops))], consts[rng.Intn(len(consts))])
			switch rng.Intn(6) {
			case 0:
				return "not " + c
			case 1:
				return fmt.Sprintf("arg%d", rng.Intn(4))
			}
			return c
		}
		k := 1 + rng.Intn(n-1)
		join := []string{" and ", " or "}[rng.Intn(2)]
		s := "(" + gen(k, depth+1) + join + gen(n-k, depth+1) + ")"
		if rng.Intn(5) == 0 {
			s = "not " + s
		}
		return s
	}
	return gen(n, 0)
}

// randomValues returns operands near the edges of the ranges, with random
// signedness, and some unread.
func randomValues(rng *rand.Rand) Values {
	vals := []uint64{0, 1, math.MaxUint64, 500, 499, 501, uint64(math.MaxUint64 - 499), 1 << 63, 1<<63 - 1, 1<<63 + 1}
	var v Values
	for i := 0; i < 4; i++ {
		x := vals[rng.Intn(len(vals))]
		if rng.Intn(4) == 0 {
			x = rng.Uint64()
		}
		if rng.Intn(10) > 0 {
			v.Set(i, x, rng.Intn(2) == 0)
		}
	}
	return v
}

// TestCompiledMatchesTree holds the compiled form (negations pushed down,
// and distributed over or, groups absorbed) against the tree as parsed,
// evaluated with exact integers, for random predicates and values.
func TestCompiledMatchesTree(t *testing.T) {
	rng := rand.New(rand.NewSource(1))
	compiled := 0
	for i := 0; i < 3000; i++ {
		text := randomPredicate(rng, 1+rng.Intn(5))
		p, err := ParsePredicate(text, argResolver)
		if err != nil {
			if strings.Contains(err.Error(), "too long") {
				continue
			}
			t.Fatalf("%q: %v", text, err)
		}
		compiled++
		for j := 0; j < 50; j++ {
			v := randomValues(rng)
			if got, want := p.Eval(&v), p.tree.evalTree(&v, false); got != want {
				t.Fatalf("%q (compiled %s) with %+v: %v, reference %v", text, p, v, got, want)
			}
		}
	}
	if compiled < 2000 {
		t.Fatalf("only %d of 3000 random predicates compiled", compiled)
	}
}

func TestNonzero(t *testing.T) {
	p := Nonzero("arg3", 3)
	var v Values
	v.Set(3, 200, false)
	if !p.Eval(&v) {
		t.Error("200 != 0 does not hold")
	}
	v.Set(3, 0, true)
	if p.Eval(&v) {
		t.Error("0 != 0 holds")
	}
	if got := p.Operands(); len(got) != 1 || got[0] != 3 {
		t.Errorf("operands %v", got)
	}
}

func TestEncode(t *testing.T) {
	p, err := ParsePredicate("arg2 >= 500 and arg3 != -1 or arg4 < 3", argResolver)
	if err != nil {
		t.Fatal(err)
	}
	e := p.Encode()
	if e.NTerms != 3 || e.NGroups != 2 || e.Group[0] != 3 || e.Group[1] != 4 {
		t.Fatalf("encoded %+v", e)
	}
	want := []Term{
		{Value: 500, Operand: 2, Op: opGT | opEQ},
		{Value: math.MaxUint64, Operand: 3, Op: opLT | opGT, Neg: 1},
		{Value: 3, Operand: 4, Op: opLT},
	}
	for i, w := range want {
		if e.Terms[i] != w {
			t.Errorf("term %d: %+v, want %+v", i, e.Terms[i], w)
		}
	}
	if (*Predicate)(nil).Encode() != (Pred{}) {
		t.Error("a nil predicate encodes to something")
	}
}
