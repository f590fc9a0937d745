package policy

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/open-policy-agent/opa/v1/ast"

	"github.com/spanwatch/spanwatch/snapshot"
)

// prefilterCases are policies with what the prefilter should make of
// them. Each alerts rule names the series it keeps, so a series wrongly
// filtered out shows as a missing alert.
var prefilterCases = []struct {
	name, rego, want string
}{
	{"three guards, one folded", `
alerts contains {"labels": {"alertname": "A", "id": s.process}} if {
	some s in input.series
	s.count >= data.min_count
	s.p99_ns > data.limit_ns
	s.error_ratio > 5 / 100
}`, "series: those passing count >= 10 and p99_ns > 400000000 and error_ratio > 0.05; by_span: none"},
	{"constant first", `
alerts contains {"labels": {"alertname": "A", "id": s.process}} if {
	some s in input.series
	100 < s.count
	"svc1.op1" != s.span
}`, `series: those passing count > 100 and span != "svc1.op1"; by_span: none`},
	{"strings", `
alerts contains {"labels": {"alertname": "A", "id": s.process}} if {
	some s in input.series
	s.span == "svc2.op2"
	s.container != ""
}`, `series: those passing span == "svc2.op2" and container != ""; by_span: none`},
	{"nested data and a literal float", `
alerts contains {"labels": {"alertname": "A", "id": s.process}} if {
	s := input.series[_]
	s.rate >= data.nested.rate
	s.error_ratio <= 0.1
}`, "series: those passing rate >= 5 and error_ratio <= 0.1; by_span: none"},
	{"float ties", `
alerts contains {"labels": {"alertname": "A", "id": s.process}} if {
	some s in input.series
	s.error_ratio == 0.1
}
alerts contains {"labels": {"alertname": "B", "id": s.process}} if {
	some s in input.series
	s.error_ratio >= 0.1
	s.rate < 5.0
}`, "series: those passing error_ratio == 0.1 or error_ratio >= 0.1 and rate < 5.0; by_span: none"},
	{"non-integer and negative and huge constants", `
alerts contains {"labels": {"alertname": "A", "id": s.process}} if {
	some s in input.series
	s.count > 1.5e1
	s.errors >= -1
	s.cgroup_id < 18446744073709551615
}`, "series: those passing count > 1.5e1 and errors >= -1 and cgroup_id < 18446744073709551615; by_span: none"},
	{"huge ids", `
alerts contains {"labels": {"alertname": "A", "id": s.process}} if {
	some s in input.series
	s.cgroup_id > 9223372036854775807
}`, "series: those passing cgroup_id > 9223372036854775807; by_span: none"},
	{"labels are no guard", `
alerts contains {"labels": {"alertname": "A", "id": s.process}} if {
	some s in input.series
	s.labels.span != "x"
	s.count > 120
}`, "series: those passing count > 120; by_span: none"},
	{"a built-in of the series is safe", `
alerts contains {"labels": {"alertname": "A", "id": s.process}} if {
	some s in input.series
	startswith(s.span, "svc1")
	s.count > 60
}`, "series: those passing count > 60; by_span: none"},
	{"a self-join keeps either side's series", `
alerts contains {"labels": {"alertname": "A", "id": concat("/", [a.process, b.process])}} if {
	some a in input.series
	some b in input.series
	a.count > 140
	b.count < 55
	a.span == b.span
}`, "series: those passing count > 140 or count < 55; by_span: none"},
	{"the index is used", `
alerts contains {"labels": {"alertname": "A", "id": s.process}} if {
	some i, s in input.series
	i > 3
	s.count > 100
}`, "series: all; by_span: none"},
	{"input.series counted", `
alerts contains {"labels": {"alertname": "A", "id": s.process, "n": sprintf("%d", [count(input.series)])}} if {
	some s in input.series
	s.count > 100
}`, "series: all; by_span: none"},
	{"a user function before the guard", `
f(x) := y if { y := x.count * 2 }
alerts contains {"labels": {"alertname": "A", "id": s.process}} if {
	some s in input.series
	f(s) > 10
	s.count > 100
}`, "series: all; by_span: none"},
	{"a negation ends the guards", `
alerts contains {"labels": {"alertname": "A", "id": s.process}} if {
	some s in input.series
	s.count > 60
	not s.span == "svc0.op0"
	s.count < 140
}`, "series: those passing count > 60; by_span: none"},
	{"another rule walks every series", `
alerts contains {"labels": {"alertname": "A", "id": s.process}} if {
	some s in input.series
	s.count > 100
}
alerts contains {"labels": {"alertname": "B", "id": s.process}} if {
	some s in input.series
	startswith(s.span, "svc3")
}`, "series: all; by_span: none"},
	{"a helper rule and else", `
slow contains s.process if {
	some s in input.series
	s.p99_ns > 800000000
}
level := "high" if {
	count(slow) > 3
} else := "low"
alerts contains {"labels": {"alertname": "A", "id": p, "level": level}} if {
	some p in slow
}`, "series: those passing p99_ns > 800000000; by_span: none"},
	{"in a comprehension", `
alerts contains {"labels": {"alertname": "A", "id": x}} if {
	some x in [s.process | some s in input.series; s.count > 100]
}`, "series: all; by_span: none"},
	{"input replaced", `
alerts contains {"labels": {"alertname": "A", "id": s.process}} if {
	some s in input.series
	s.count > 100
	true with input.series as []
}`, "series: all; by_span: all"},
	{"input whole", `
alerts contains {"labels": {"alertname": "A", "n": sprintf("%d", [count(object.keys(input))])}} if {
	some s in input.series
	s.count > 100
}`, "series: all; by_span: all"},
	{"a string against a number", `
alerts contains {"labels": {"alertname": "A", "id": s.process}} if {
	some s in input.series
	s.count < "5"
}`, "series: all; by_span: none"},
	{"by_span by name", `
alerts contains {"labels": {"alertname": "A", "id": s.process}} if {
	some s in input.by_span["svc1.op1"]
	s.count > 10
}
alerts contains {"labels": {"alertname": "B", "id": s.process}} if {
	some s in input.by_span["svc4.op4"]
}`, "series: none; by_span: svc1.op1, svc4.op4"},
	{"by_span iterated", `
alerts contains {"labels": {"alertname": "A", "id": name}} if {
	some name, list in input.by_span
	count(list) > 3
}`, "series: none; by_span: all"},
	{"overruns and stats only", `
alerts contains {"labels": {"alertname": "A", "id": o.comm}} if {
	some o in input.overruns
	input.stats.ringbuf_drops >= 0
}`, "series: none; by_span: none"},
	{"a guard on an iteration after another input", `
alerts contains {"labels": {"alertname": "A", "id": s.process}} if {
	input.stats.events >= 0
	some o in input.overruns
	some s in input.series
	s.span == o.span
	s.count > 50
}`, "series: those passing count > 50; by_span: none"},
}

func loadCase(t testing.TB, dir, name, rego string) *Policy {
	t.Helper()
	file := strings.NewReplacer(" ", "_", ",", "", "'", "").Replace(name)
	if err := os.WriteFile(filepath.Join(dir, file+".rego"), []byte("package spanwatch\n"+rego+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg := fmt.Sprintf("policies:\n  - {file: %s.rego, data: data.json}\n", file)
	if err := os.WriteFile(filepath.Join(dir, file+".yaml"), []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	c, err := LoadFile(filepath.Join(dir, file+".yaml"))
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return c.Policies[0]
}

func writeData(t testing.TB, dir string) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(dir, "data.json"), []byte(`{"min_count": 10, "limit_ns": 400000000, "nested": {"rate": 5}}`), 0o644); err != nil {
		t.Fatal(err)
	}
}

// randomSnapshot makes series with ties and edge values: error ratios of
// exactly 0.1, rates of exactly 5, counts around the guards' constants,
// cgroup ids above 2^63.
func randomSnapshot(rng *rand.Rand, n int) *snapshot.Snapshot {
	s := &snapshot.Snapshot{Version: snapshot.Version, Time: time.Unix(1700000000, 0), WindowNs: 10e9}
	for i := 0; i < n; i++ {
		count := uint64(rng.IntN(160))
		errs := uint64(0)
		if count > 0 {
			errs = uint64(rng.IntN(int(count)/5 + 1))
		}
		if i%7 == 0 {
			count, errs = 100, 10 // error ratio exactly 0.1
		}
		cg := uint64(1000 + rng.IntN(5))
		if i%11 == 0 {
			cg = math.MaxUint64 - uint64(rng.IntN(3))
		}
		rate := float64(count) / 10
		if i%5 == 0 {
			rate = 5
		}
		ser := snapshot.Series{
			Span: fmt.Sprintf("svc%d.op%d", i%5, i%5), CgroupID: cg, Identity: snapshot.Identity{Process: fmt.Sprintf("p%d", i)},
			Count: count, Errors: errs, Rate: rate, P99Ns: uint64(rng.IntN(1000)) * 1e6,
		}
		if count > 0 {
			ser.ErrorRatio = float64(errs) / float64(count)
		}
		if rng.IntN(3) > 0 {
			ser.Container = fmt.Sprintf("web-%d", rng.IntN(3))
		}
		s.Series = append(s.Series, ser)
	}
	s.Overruns = []snapshot.Overrun{{Span: "svc1.op1", Comm: "api"}, {Span: "svc2.op2", Comm: "worker"}}
	return s
}

// TestPrefilterEquivalent evaluates every case over random snapshots with
// its full input and with the Batch's filtered one, and requires the same
// alerts. It also checks what the prefilter made of each case.
func TestPrefilterEquivalent(t *testing.T) {
	dir := t.TempDir()
	writeData(t, dir)
	rng := rand.New(rand.NewPCG(7, 8))
	var snaps []*snapshot.Snapshot
	for i := 0; i < 20; i++ {
		snaps = append(snaps, randomSnapshot(rng, 150))
	}
	for _, tc := range prefilterCases {
		t.Run(tc.name, func(t *testing.T) {
			p := loadCase(t, dir, tc.name, tc.rego)
			if got := p.Prefilter(); got != tc.want {
				t.Errorf("prefilter:\n got %s\nwant %s", got, tc.want)
			}
			fired := 0
			for _, s := range snaps {
				full, err := p.Eval(context.Background(), Input(s))
				if err != nil {
					t.Fatal(err)
				}
				filtered, err := p.Eval(context.Background(), NewBatch(s).Input(p, s.Series, s.Window()))
				if err != nil {
					t.Fatal(err)
				}
				if a, b := labelSets(full), labelSets(filtered); a != b {
					t.Fatalf("alerts differ\nfull input:\n%s\nfiltered input:\n%s", a, b)
				}
				fired += len(full)
			}
			if fired == 0 {
				t.Errorf("no alert over %d snapshots: the case tests nothing", len(snaps))
			}
		})
	}
}

func labelSets(alerts []PolicyAlert) string {
	var got []string
	for _, a := range alerts {
		got = append(got, fmt.Sprint(a.Labels))
	}
	slices.Sort(got)
	return strings.Join(got, "\n")
}

// TestGuardNumbers checks guards against OPA's own comparison for values
// where float rounding could mislead: constants that round to the same
// float64 as the field, non-integer constants on integer fields, values
// past 2^63.
func TestGuardNumbers(t *testing.T) {
	count, ratio := fieldByName["count"], fieldByName["error_ratio"]
	big := fieldByName["cgroup_id"]
	for _, tc := range []struct {
		f     *seriesField
		s     snapshot.Series
		val   string
		want  [6]bool // >, >=, <, <=, ==, !=
		label string
	}{
		{ratio, snapshot.Series{Count: 10, ErrorRatio: 0.1}, "0.1", [6]bool{false, true, false, true, true, false}, "equal"},
		{ratio, snapshot.Series{Count: 10, ErrorRatio: 0.1}, "0.10000000000000001", [6]bool{false, false, true, true, false, true}, "same float64, larger decimal"},
		{ratio, snapshot.Series{Count: 10, ErrorRatio: 0.1}, "0.09999999999999999", [6]bool{true, true, false, false, false, true}, "smaller decimal"},
		{ratio, snapshot.Series{Count: 10, ErrorRatio: 0.1}, "1e-1", [6]bool{false, true, false, true, true, false}, "exponent form"},
		{count, snapshot.Series{Count: 15}, "1.5e1", [6]bool{false, true, false, true, true, false}, "integer as float"},
		{count, snapshot.Series{Count: 15}, "14.5", [6]bool{true, true, false, false, false, true}, "non-integer"},
		{count, snapshot.Series{Count: 0}, "-1", [6]bool{true, true, false, false, false, true}, "negative"},
		{big, snapshot.Series{CgroupID: math.MaxUint64}, "9223372036854775807", [6]bool{true, true, false, false, false, true}, "past 2^63"},
		{big, snapshot.Series{CgroupID: math.MaxUint64}, "18446744073709551615", [6]bool{false, true, false, true, true, false}, "max uint64"},
		{big, snapshot.Series{CgroupID: 1 << 63}, "1e400", [6]bool{false, false, true, true, false, true}, "no float64"},
	} {
		// OPA's own answer, to be sure the table is right.
		for i, op := range []string{">", ">=", "<", "<=", "==", "!="} {
			c := ast.Compare(tc.f.term(&tc.s).Value, ast.Number(tc.val))
			if got := [...]bool{c > 0, c >= 0, c < 0, c <= 0, c == 0, c != 0}[i]; got != tc.want[i] {
				t.Fatalf("%s: OPA says %s %s %s is %v", tc.label, tc.f.term(&tc.s), op, tc.val, got)
			}
		}
		for i, op := range []cmpOp{cmpGT, cmpGE, cmpLT, cmpLE, cmpEQ, cmpNE} {
			g, ok := newGuard(tc.f, op, ast.Number(tc.val))
			if !ok {
				t.Fatalf("%s: no guard", tc.label)
			}
			if got := g.holds(&tc.s); got != tc.want[i] {
				t.Errorf("%s: %s %d %s: %v, want %v", tc.label, tc.f.name, op, tc.val, got, tc.want[i])
			}
		}
	}
}

// TestSeriesFields checks that every field a guard can read is in the
// input with the very value the guard reads, over random series: the
// prefilter and OPA see the same numbers.
func TestSeriesFields(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 10))
	snap := randomSnapshot(rng, 200)
	for i := range snap.Series {
		s := &snap.Series[i]
		s.SumNs, s.MinNs, s.MaxNs, s.P50Ns, s.P90Ns, s.BudgetNs, s.OverBudget = rng.Uint64(), rng.Uint64N(1e9), rng.Uint64(), rng.Uint64N(1e6), rng.Uint64N(1e8), rng.Uint64N(3)*1e8, rng.Uint64N(5)
		s.Pod, s.Unit, s.Cgroup = fmt.Sprint("pod", i%3), fmt.Sprint("u", i%2), fmt.Sprint("/c", i)
		if i%9 == 0 {
			s.Rate, s.ErrorRatio = math.NaN(), math.Inf(1)
		}
		obj := seriesObject(s)
		keys := 0
		for _, f := range seriesFields {
			got := obj.Get(f.key)
			if got == nil || got.Value.Compare(f.term(s).Value) != 0 {
				t.Fatalf("series %d field %s: input %v, guards read %v", i, f.name, got, f.term(s))
			}
			keys++
		}
		if keys != obj.Len()-1 { // all fields but labels
			t.Fatalf("the input has %d fields, seriesFields %d", obj.Len()-1, keys)
		}
	}
}

// TestFilterGuardOrder checks that trying the guards most selective first
// keeps the same series as trying them in the policy's order, for every
// prefilter case over random snapshots, and that the order is by the
// sample's failures.
func TestFilterGuardOrder(t *testing.T) {
	dir := t.TempDir()
	writeData(t, dir)
	rng := rand.New(rand.NewPCG(9, 10))
	var snaps []*snapshot.Snapshot
	for i := 0; i < 10; i++ {
		snaps = append(snaps, randomSnapshot(rng, 1000))
	}
	inOrder := func(n *inputNeeds, series []snapshot.Series) []int32 {
		var out []int32
		for i := range series {
			for _, gs := range n.iters {
				ok := true
				for j := range gs {
					ok = ok && gs[j].holds(&series[i])
				}
				if ok {
					out = append(out, int32(i))
					break
				}
			}
		}
		return out
	}
	checked := 0
	for _, tc := range prefilterCases {
		p := loadCase(t, dir, tc.name, tc.rego)
		if p.needs.series != needFiltered {
			continue
		}
		for _, s := range snaps {
			if got, want := p.needs.filter(s.Series, nil), inOrder(&p.needs, s.Series); !slices.Equal(got, want) {
				t.Fatalf("%s: filter kept %d series, in the policy's order %d", tc.name, len(got), len(want))
			}
		}
		checked++
	}
	if checked == 0 {
		t.Fatal("no case with a filtered input")
	}

	p := loadCase(t, dir, "order", `alerts contains {"labels": {"alertname": "A"}} if {
	some s in input.series
	s.count >= 0
	s.p99_ns > 990000000
}`)
	gs := p.needs.iters[0]
	if got := orderGuards(gs, snaps[0].Series); got[0] != &gs[1] || got[1] != &gs[0] {
		t.Errorf("order: %s first, want p99_ns (count >= 0 always holds)", got[0].field.name)
	}
	if got := orderGuards(gs, nil); got[0] != &gs[0] {
		t.Errorf("no series: %s first, want the policy's order", got[0].field.name)
	}
}
