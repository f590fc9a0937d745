package function

import (
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// TestDecodeArgs: labels from arguments (integers with a type, C strings,
// pointer and length) and an error predicate over the results decode
// into the operands the BPF side reads; every mistake is an error at its
// file:line:col, those the ABI decides (a seventh C argument, a third C
// result) only against a readable binary.
func TestDecodeArgs(t *testing.T) {
	cc, err := exec.LookPath("cc")
	if err != nil {
		t.Skip("no C compiler (cc) on PATH: install build-essential")
	}
	dir := t.TempDir()
	prog := filepath.Join(dir, "argsprog")
	if out, err := exec.Command(cc, "-O2", "-o", prog, "testdata/argsprog.c").CombinedOutput(); err != nil {
		t.Fatalf("cc: %v: %s", err, out)
	}
	file := filepath.Join(dir, "rules.yaml")

	got, err := decode(t, file, "- binary: argsprog\n  function: handle\n  labels: {status: arg0.s32, route: {ptr: arg1}, n: {ptr: 2, len: 3}}\n  label_cap: 7\n  error: ret.s32 == -1 or ret1.u8 > 3 or ret.s32 < -9\n")
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 {
		t.Fatalf("decoded %d targets, want 1", len(got))
	}
	g := got[0]
	wantOps := []Operand{
		{Kind: OperandInt, Reg: 0, Size: 4, Signed: true, Text: "arg0.s32"},
		{Kind: OperandCString, Reg: 1, LenReg: -1, Text: "arg1"},
		{Kind: OperandPtrLen, Reg: 2, LenReg: 3, Text: "arg2[:arg3]"},
	}
	if !reflect.DeepEqual(g.LabelOperands, wantOps) || g.Labels.Cap != 7 || strings.Join(g.Labels.Names(), ",") != "status,route,n" {
		t.Errorf("labels %+v, operands %+v; want status, route, n with cap 7 and %+v", g.Labels, g.LabelOperands, wantOps)
	}
	wantRes := []Operand{
		{Kind: OperandInt, Reg: 0, Size: 4, Signed: true, Text: "ret.s32"},
		{Kind: OperandInt, Reg: 1, Size: 1, Signed: false, Text: "ret1.u8"},
	}
	if !reflect.DeepEqual(g.Results, wantRes) || g.Error.String() != "$0 == -1 or $1 > 3 or $0 < -9" {
		t.Errorf("results %+v, error %s; want %+v and $0 == -1 or $1 > 3 or $0 < -9", g.Results, g.Error, wantRes)
	}

	for _, tc := range []struct{ text, want string }{
		{"  labels: {status: ret0}\n", ":3:20: label status: ret0 is a result: labels read the arguments at the entry"},
		{"  labels: {status: arg0.s33}\n", `:3:20: label status: arg0.s33: unknown type "s33"`},
		{"  labels: {status: arg9}\n", ":3:20: label status: unknown operand arg9: want arg0 to arg8"},
		{"  labels: {route: {ptr: arg1, len: arg1}}\n", ":3:19: label route: ptr and len are the same argument (arg1)"},
		{"  labels: {route: {len: arg2}}\n", ":3:19: label route needs ptr: argN"},
		{"  labels: {route: {ptr: x}}\n", ":3:25: label route: ptr must be an argument"},
		{"  labels: {span: arg0}\n", `:3:12: label name "span" is taken by the span name`},
		{"  labels: {a: arg0, b: arg1, c: arg2, d: arg3}\n", ":3:11: 4 labels: a series carries at most 3"},
		{"  labels: {status: arg6}\n", ":3:20: " + prog + ": label status reads arg6, but the System V ABI passes 6 integer arguments in registers on amd64 (arg0 to arg5)"},
		{"  label_cap: 5\n", ":3:14: label_cap without labels:"},
		{"  error: arg0 == 1\n", ":3:10: error: arg0 is an argument: error: reads the results at the return"},
		{"  error: ret == 1 or ret2 != 0\n", ":3:22: " + prog + ": error reads ret2, but the System V ABI returns 2 integer results in registers on amd64 (ret0 to ret1)"},
		{"  error: ret => 1\n", `:3:14: error: unknown operator "=>": did you mean >=?`},
		{"  error: ret == 1 or status != 0\n", ":3:22: " + prog + ": error: handle in " + prog + ": error names a result, but only Go functions name their results (a C or C++ result has no name in DWARF): read it as ret (ret.s32 for an int)"},
		{"  error: ret.x == 1\n", `:3:10: error: ret.x: unknown type "x"`},
		{"  error: ret0 == 1 or ret1 == 1 or ret2 == 1 or ret3 == 1 or ret4 == 1\n", ":3:62: error: ret4: an error predicate reads at most 4 distinct results"},
	} {
		text := "- binary: argsprog\n  function: handle\n" + tc.text
		got, err := decode(t, file, text)
		if err == nil || !strings.Contains(err.Error(), file+tc.want) || got != nil {
			t.Errorf("%q: %v; want an error %s%s and nothing decoded", tc.text, err, file, tc.want)
		}
	}
}
