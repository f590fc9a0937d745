package policy

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"testing/fstest"
	"time"

	"github.com/open-policy-agent/opa/v1/rego"

	"github.com/spanwatch/spanwatch/internal/memtest"
	"github.com/spanwatch/spanwatch/snapshot"
)

// hostilePolicy is one of testdata/hostile: a policy that tries to take
// the agent's memory (README.md there), with kind "call" or "step".
type hostilePolicy struct {
	name, kind string
	src        []byte
}

func hostilePolicies(t testing.TB) []hostilePolicy {
	t.Helper()
	files, err := filepath.Glob("testdata/hostile/*.rego")
	if err != nil || len(files) < 10 {
		t.Fatalf("hostile policies: %v, %d files", err, len(files))
	}
	var out []hostilePolicy
	for _, f := range files {
		src, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		name, kind, _ := strings.Cut(strings.TrimSuffix(filepath.Base(f), ".rego"), ".")
		out = append(out, hostilePolicy{name, kind, src})
	}
	return out
}

// compileHostile compiles a hostile policy beside a plain one that fires
// for every series.
func compileHostile(t testing.TB, src []byte) (*Policy, *Policy) {
	t.Helper()
	fsys := fstest.MapFS{
		"spanwatch.yaml": {Data: []byte("policies:\n  - file: hostile.rego\n  - file: plain.rego\n")},
		"hostile.rego":   {Data: src},
		"plain.rego":     {Data: []byte("package spanwatch\n\nalerts contains {\"labels\": {\"alertname\": \"Plain\", \"span\": s.span}} if {\n\tsome s in input.series\n}\n")},
	}
	cfg, err := Parse("spanwatch.yaml", fsys["spanwatch.yaml"].Data, Options{FS: fsys})
	if err != nil {
		t.Fatal(err)
	}
	return cfg.Policies[0], cfg.Policies[1]
}

// hostileInput is one series whose count a user drove to 10^8 and whose
// name is 100 bytes.
func hostileInput() InputValue {
	return Input(&snapshot.Snapshot{Version: snapshot.Version, Time: time.Now(), WindowNs: 10e9,
		Series: []snapshot.Series{{Span: strings.Repeat("s", 100), Count: 1e8}}})
}

// heapPeak returns a function that returns the Go heap's peak growth
// since heapPeak was called (after a collection).
func heapPeak() func() int64 {
	runtime.GC()
	base := memtest.Heap()
	peak := memtest.Peaks(time.Millisecond)
	return func() int64 { _, h := peak(); return h - base }
}

// TestHostilePolicyMemory evaluates each hostile policy under a 64 MiB
// bound and a 10 s timeout (long enough that time stops none of them):
// each is cut off with an error wrapping ErrMemory that says what it
// would have built, within the bound plus a margin for the collection
// that confirms it; and the plain policy beside it still evaluates.
func TestHostilePolicyMemory(t *testing.T) {
	if testing.Short() {
		t.Skip("allocates up to the bound many times over")
	}
	const bound = 64 << 20
	input := hostileInput()
	for _, tc := range hostilePolicies(t) {
		t.Run(tc.name, func(t *testing.T) {
			hostile, plain := compileHostile(t, tc.src)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			peak := heapPeak()
			wctx, stop := WatchHeap(ctx, bound)
			start := time.Now()
			_, err := hostile.Eval(wctx, input)
			took := time.Since(start)
			cut := stop()
			grew := peak()
			t.Logf("%s: heap +%d MiB in %v, watch cut %v: %v", tc.kind, grew>>20, took.Round(time.Millisecond), cut, err)
			if !errors.Is(err, ErrMemory) {
				t.Fatalf("err = %v, want ErrMemory", err)
			}
			if tc.kind == "call" && (cut || !strings.Contains(err.Error(), "would build")) {
				t.Errorf("a one-call allocation was not refused by its guard: cut %v, %v", cut, err)
			}
			if tc.kind == "step" && !cut {
				t.Errorf("a step-by-step allocation was not cut off by the watch: %v", err)
			}
			// The margin: what the evaluator allocates between two
			// samples and during the collection that confirms the cut
			// (up to about 64 MiB measured on a loaded 2-core machine),
			// with room for slower ones; unbounded, each allocates GBs.
			if grew > bound+192<<20 {
				t.Errorf("heap grew by %d MiB under a %d MiB bound", grew>>20, bound>>20)
			}
			got, err := plain.Eval(WithMemoryLimit(ctx, bound), input)
			if err != nil || len(got) != 1 {
				t.Errorf("the plain policy after it: %v, %v", got, err)
			}
		})
	}
}

// TestGuardsOnlyWithABound checks that the wrapped builtins behave as
// OPA's own where no bound is set (any other user of OPA in the process)
// and under a bound they fit: the same results.
func TestGuardsOnlyWithABound(t *testing.T) {
	for _, q := range []string{
		`x := concat("-", ["a", "b", "c"])`,
		`x := numbers.range(1, 5)`,
		`x := numbers.range_step(1, 10, 3)`,
		`x := replace("aXbX", "X", "yy")`,
		`x := strings.replace_n({"a": "bb", "c": ""}, "abcabc")`,
		`x := regex.replace("a1b22", "[0-9]+", "<$0>")`,
		`x := split("a,b,c", ",")`,
		`x := regex.split(",", "a,b,c")`,
		`x := regex.find_n("[a-z]", "a1b2", -1)`,
		`x := regex.find_all_string_submatch_n("(a)(b)?", "abab", -1)`,
		`x := indexof_n("abab", "b")`,
		`x := sprintf("%5d|%-4s|%q|%x", [42, "ab", "c\"", "hi"])`,
		`x := json.marshal({"a": [1, "<b>"]})`,
		`x := json.marshal_with_options({"a": [1]}, {"indent": "  ", "prefix": "> "})`,
		`x := yaml.marshal({"a": [1, {"b": "c"}]})`,
		`x := urlquery.encode_object({"a": ["b c", "d"]})`,
		`x := array.flatten([1, [2, [3]], []])`,
		`x := json.unmarshal("[1, {\"a\": [2]}]")`,
		`x := yaml.unmarshal("a: [1, 2]\nb: c\n")`,
		`x := strings.render_template("{{.a}}-{{range .b}}{{.}}{{end}}", {"a": 1, "b": ["x", "y"]})`,
		"x := $\"v={input.n}\"",
	} {
		var results []string
		for _, ctx := range []context.Context{context.Background(), WithMemoryLimit(context.Background(), 64<<20)} {
			rs, err := rego.New(rego.Query(q), rego.Input(map[string]any{"n": 7}), rego.StrictBuiltinErrors(true)).Eval(ctx)
			if err != nil || len(rs) != 1 {
				t.Errorf("%s: %v %v", q, rs, err)
				results = append(results, "")
				continue
			}
			results = append(results, fmt.Sprint(rs[0].Bindings["x"]))
		}
		if results[0] != results[1] {
			t.Errorf("%s: %q without a bound, %q with one", q, results[0], results[1])
		}
	}
}

// TestRenderTemplateRefusesCalls checks that a template that calls
// templates, which can recurse without end in one step, is refused under
// a bound.
func TestRenderTemplateRefusesCalls(t *testing.T) {
	for _, tmpl := range []string{
		`{{define "a"}}{{template "a" .}}{{template "a" .}}{{end}}{{template "a" .}}`,
		`{{block "b" .}}x{{end}}`,
	} {
		q := fmt.Sprintf("x := strings.render_template(%q, {})", tmpl)
		_, err := rego.New(rego.Query(q), rego.StrictBuiltinErrors(true)).Eval(WithMemoryLimit(context.Background(), 64<<20))
		if !errors.Is(err, ErrMemory) || !strings.Contains(err.Error(), "{{template}}") {
			t.Errorf("%s: %v", tmpl, err)
		}
	}
}

// TestGuardCosts measures what OPA's builtins allocate per element they
// build, unguarded (the allocations of the call alone: a query that builds
// the operands and the same query with the call, subtracted), against the
// guards' estimates: each estimate is within a factor of two of the real
// cost, so a bound refuses what would pass it and lets through what would
// not.
func TestGuardCosts(t *testing.T) {
	if testing.Short() {
		t.Skip("allocates about 200 MB")
	}
	const n = 200000
	ab := fmt.Sprintf("s := concat(\"\", [\"ab\" | some _ in numbers.range(1, %d)])", n/2)
	list := fmt.Sprintf("s := concat(\"\", [\"[\", concat(\",\", [\"10\" | some _ in numbers.range(1, %d)]), \"]\"])", n)
	for _, tc := range []struct {
		operands, call string
		est            int64
	}{
		{"a := 1000; b := a + " + fmt.Sprint(n-1), "numbers.range(a, b)", n * rangeBytes},
		{ab, `split(s, "")`, n * partBytes},
		{ab, `regex.find_n("[a-z]", s, -1)`, n * matchBytes},
		{ab, `indexof_n(s, "b")`, n / 2 * partBytes},
		{list, "json.unmarshal(s)", 3*n + n*valueBytes},
		{fmt.Sprintf("a := [[1, 2] | some _ in numbers.range(1, %d)]", n/2), "array.flatten(a)", n * leafBytes},
		{fmt.Sprintf("a := [\"abcdefgh\" | some _ in numbers.range(1, %d)]", n), "json.marshal(a)", 11*n + n*nodeBytes},
	} {
		alloc := func(q string) int64 {
			pq, err := rego.New(rego.Query(q)).PrepareForEval(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			var s runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&s)
			before := s.TotalAlloc
			rs, err := pq.Eval(context.Background())
			runtime.ReadMemStats(&s)
			if err != nil || len(rs) != 1 {
				t.Fatalf("%s: %v %v", q, rs, err)
			}
			return int64(s.TotalAlloc - before)
		}
		base := alloc(tc.operands + "; x := 1")
		got := alloc(tc.operands+"; x := count("+tc.call+")") - base
		t.Logf("%s: allocated %d bytes; estimate %d", tc.call, got, tc.est)
		if tc.est < got/2 || tc.est > got*2 {
			t.Errorf("%s: estimate %d, allocated %d", tc.call, tc.est, got)
		}
	}
}
