package policy

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/open-policy-agent/opa/v1/ast"

	"github.com/spanwatch/spanwatch/snapshot"
)

// TestFoldConstants checks which calls foldConstants replaces and with
// what: OPA's own result for number operands, nothing for a call that
// fails or has a non-constant operand, nothing in a module that could
// mean its own function by a built-in's name.
func TestFoldConstants(t *testing.T) {
	for _, tc := range []struct{ name, src, want string }{
		{"ratio", "x if { input.a > 5 / 100 }", "gt(input.a, 0.05)"},
		{"nested", "x if { input.a > (1 + 2) * 3 - 4 % 3 }", "gt(input.a, 8)"},
		{"big", "x if { input.a < 18446744073709551615 * 10 }", "lt(input.a, 184467440737095516150)"},
		{"in head", `y := {"v": 1 / 3}`, "0.333333333333333333"},
		{"division by zero kept", "x if { input.a > 5 / 0 }", "div(5, 0)"},
		{"float rem kept", "x if { input.a > 5.5 % 2 }", "rem(5.5, 2)"},
		{"variable kept", "x if { input.a > input.b / 100 }", "div(input.b, 100)"},
		{"inside other call", `x if { sprintf("%v", [2 * 3]) == "6" }`, "[6]"},
		{"own function", "div(a, b) := a\nx if { input.a > 5 / 100 }", "div(5, 100)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mod, err := ast.ParseModuleWithOpts("p.rego", "package spanwatch\n"+tc.src+"\n", ast.ParserOptions{RegoVersion: ast.RegoV1})
			if err != nil {
				t.Fatal(err)
			}
			foldConstants(mod)
			if got := mod.String(); !strings.Contains(got, tc.want) {
				t.Errorf("folded module lacks %q:\n%s", tc.want, got)
			}
		})
	}
}

// foldCases are policies with constant arithmetic, including calls that
// must not fold (their errors and undefinedness must stay).
var foldCases = []struct{ name, rego string }{
	{"ratio guard", `alerts contains {"labels": {"alertname": "A", "p": sprintf("%v", [s.process])}} if {
	some s in input.series
	s.error_ratio > 5 / 100
	s.count >= 2 * 5
}`},
	{"arithmetic in head", `alerts contains {"labels": {"alertname": "A", "p": s.process}, "annotations": {"limit": sprintf("%v", [1 / 3]), "ms": sprintf("%v", [s.p99_ns / (1000 * 1000)])}} if {
	some s in input.series
	s.p99_ns > 500 * 1000 * 1000
}`},
	{"mixed with data", `alerts contains {"labels": {"alertname": "A", "p": s.process}} if {
	some s in input.series
	s.rate > data.nested.rate + 1 / 2
	s.count > (data.min_count - 7) % 4
}`},
	{"division by zero", `alerts contains {"labels": {"alertname": "A", "p": s.process}} if {
	some s in input.series
	s.count > 10
	x := 5 / 0
}
alerts contains {"labels": {"alertname": "B", "p": s.process}} if {
	some s in input.series
	s.error_ratio >= 10 / 100
}`},
	{"float rem", `alerts contains {"labels": {"alertname": "A", "p": s.process}} if {
	some s in input.series
	s.count > 5.5 % 2
}
alerts contains {"labels": {"alertname": "B", "p": s.process}} if {
	some s in input.series
	s.count > 150 - 10
}`},
}

// TestFoldEquivalent evaluates each case folded and as written over
// random snapshots, through a Batch and over the whole input, and
// requires the same alerts, labels and annotations, and the same errors.
func TestFoldEquivalent(t *testing.T) {
	dir := t.TempDir()
	writeData(t, dir)
	rng := rand.New(rand.NewPCG(11, 12))
	var snaps []*snapshot.Snapshot
	for i := 0; i < 10; i++ {
		snaps = append(snaps, randomSnapshot(rng, 150))
	}
	for _, tc := range foldCases {
		t.Run(tc.name, func(t *testing.T) {
			folded := loadCase(t, dir, tc.name, tc.rego)
			noFold = true
			plain := loadCase(t, dir, tc.name, tc.rego)
			noFold = false
			fired := 0
			for _, s := range snaps {
				for _, in := range []func(p *Policy) InputValue{
					func(*Policy) InputValue { return Input(s) },
					func(p *Policy) InputValue { return NewBatch(s).Input(p, s.Series, s.Window()) },
				} {
					a, errA := folded.Eval(context.Background(), in(folded))
					b, errB := plain.Eval(context.Background(), in(plain))
					if fmt.Sprint(errA) != fmt.Sprint(errB) {
						t.Fatalf("errors differ: folded %v, as written %v", errA, errB)
					}
					if x, y := alertStrings(a), alertStrings(b); x != y {
						t.Fatalf("alerts differ\nfolded:\n%s\nas written:\n%s", x, y)
					}
					fired += len(a)
				}
			}
			if fired == 0 {
				t.Errorf("no alert over %d snapshots: the case tests nothing", len(snaps))
			}
		})
	}
}

func alertStrings(alerts []PolicyAlert) string {
	var got []string
	for _, a := range alerts {
		got = append(got, fmt.Sprint(a.Labels, a.Annotations))
	}
	slices.Sort(got)
	return strings.Join(got, "\n")
}
