//go:build linux

package function

import (
	"bytes"
	"context"
	"debug/elf"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/spanwatch/spanwatch/internal/funcs"
)

// buildParamsProg builds testdata/paramsprog.c with gcc and flags into
// the test's directory.
func buildParamsProg(t *testing.T, name string, flags ...string) string {
	t.Helper()
	cc, err := exec.LookPath("gcc")
	if err != nil {
		t.Skip("no gcc on PATH: install build-essential")
	}
	prog := filepath.Join(t.TempDir(), name)
	args := append(append([]string{}, flags...), "-o", prog, "testdata/paramsprog.c")
	if out, err := exec.Command(cc, args...).CombinedOutput(); err != nil {
		t.Fatalf("gcc: %v: %s", err, out)
	}
	return prog
}

// readParams lists prog's functions and reads their DWARF declarations.
func readParams(t *testing.T, prog string) (*funcs.File, *ParamTable) {
	t.Helper()
	fh, b, err := OpenBinary(context.Background(), prog, funcs.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer fh.Close()
	defer b.Close()
	p, err := ReadParams(fh, b)
	if err != nil {
		t.Fatal(err)
	}
	return b.Funcs, p
}

func findFunc(t *testing.T, f *funcs.File, name string) *funcs.Func {
	t.Helper()
	for i := range f.Funcs {
		if f.Funcs[i].Name == name {
			return &f.Funcs[i]
		}
	}
	t.Fatalf("no function %s in %s", name, f.Path)
	return nil
}

// TestPlaceParams places the parameters of paramsprog.c's functions,
// built by gcc -O2 -g, in the System V integer registers: each
// parameter's operand (or the start of why it is refused) is checked,
// so a float counted as an integer register, a large struct counted as
// registers, a struct result's hidden address left out, or a type's
// size or signedness taken wrong each fail a row.
func TestPlaceParams(t *testing.T) {
	prog := buildParamsProg(t, "paramsprog", "-O2", "-g")
	f, p := readParams(t, prog)
	if f.Arch != funcs.ArchAMD64 {
		t.Skip("parameters are placed by the x86-64 rules in this test")
	}
	for _, tc := range []struct {
		fn   string
		want map[string]string // parameter: operand, or "!" and the reason's start
	}{
		{"handle", map[string]string{"code": "arg0.s32", "path": "{ptr: arg1}", "n": "arg2.s64"}},
		{"after_pair", map[string]string{"p": "!is a struct passed by value", "code": "!it follows p (struct pair)"}},
		{"after_big", map[string]string{"b": "!is a struct larger than 16 bytes", "s": "arg0.s16"}},
		{"with_float", map[string]string{"x": "!is a floating-point value", "flags": "arg0.u32", "lv": "arg1.u32", "port": "arg2.u16", "buf": "{ptr: arg3}"}},
		{"ret_big", map[string]string{"v": "arg1.s64", "w": "arg2.s32"}},
	} {
		fn := findFunc(t, f, tc.fn)
		sp := p.Lookup(fn)
		if sp == nil {
			t.Errorf("%s: no DWARF declaration found", tc.fn)
			continue
		}
		places := PlaceParams(sp, f.Arch)
		if len(places) != len(tc.want) {
			t.Errorf("%s: %d parameters, want %d", tc.fn, len(places), len(tc.want))
		}
		for _, pl := range places {
			arg, why := pl.Arg()
			want := tc.want[pl.Name]
			if r, refused := strings.CutPrefix(want, "!"); refused {
				if arg != "" || !strings.HasPrefix(why, r) {
					t.Errorf("%s: %s: got %q (%q), want refused: %s...", tc.fn, pl.Name, arg, why, r)
				}
			} else if arg != want {
				t.Errorf("%s: %s (%s): got %q (%s), want %s", tc.fn, pl.Name, pl.Type, arg, why, want)
			}
		}
	}
}

// TestResolveParams resolves labels by parameter as attaching does: the
// placed operands of handle, and the errors for an unknown name, a
// parameter after a struct by value, a binary without DWARF and a Go
// function.
func TestResolveParams(t *testing.T) {
	prog := buildParamsProg(t, "paramsprog", "-O2", "-g")
	f, p := readParams(t, prog)
	if f.Arch != funcs.ArchAMD64 {
		t.Skip("parameters are placed by the x86-64 rules in this test")
	}
	ops := []Operand{{Param: "path", Reg: -1}, {Kind: OperandInt, Reg: 2, Size: 8, Signed: true, Text: "arg2"}, {Param: "code", Reg: -1}}
	got, err := resolveParams(ops, p, findFunc(t, f, "handle"), prog, false, f.Arch)
	if err != nil {
		t.Fatal(err)
	}
	want := []Operand{
		{Kind: OperandCString, Reg: 1, Size: 8, Text: "{ptr: arg1}", Param: "path"},
		ops[1],
		{Kind: OperandInt, Reg: 0, Size: 4, Signed: true, Text: "arg0.s32", Param: "code"},
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("operand %d: got %+v, want %+v", i, got[i], want[i])
		}
	}
	bare := buildParamsProg(t, "paramsprog-nodebug", "-O2")
	bf, bp := readParams(t, bare)
	for _, tc := range []struct {
		name  string
		p     *ParamTable
		f     *funcs.File
		fn    string
		param string
		goABI bool
		want  string
	}{
		{"unknown", p, f, "handle", "status", false, "handle in " + prog + " has no parameter status (its parameters: code, path, n)"},
		{"after a struct", p, f, "after_pair", "code", false, "after_pair in " + prog + ": parameter code: it follows p (struct pair), which is a struct passed by value, whose registers depend on its fields' classes"},
		{"no DWARF", bp, bf, "handle", "code", false, "no DWARF for handle in " + bare + ": name arguments by position, argN"},
		{"C as Go", p, f, "handle", "code", true, "handle: its DWARF unit's language (0x1d) is not Go, as its binary is: name arguments by position, argN"},
	} {
		_, err := resolveParams([]Operand{{Param: tc.param, Reg: -1}}, tc.p, findFunc(t, tc.f, tc.fn), tc.f.Path, tc.goABI, tc.f.Arch)
		if err == nil || !strings.HasPrefix(err.Error(), tc.want) {
			t.Errorf("%s: got %v, want %s...", tc.name, err, tc.want)
		}
	}
}

// TestDecodeParams checks labels by parameter as spanwatch check does
// against a readable binary: a known name decodes, an unknown one, one
// after a struct by value, and one in a binary without DWARF are errors
// at the label, naming the function and the binary.
func TestDecodeParams(t *testing.T) {
	prog := buildParamsProg(t, "paramsprog", "-O2", "-g")
	bare := buildParamsProg(t, "paramsprog-nodebug", "-O2")
	file := filepath.Join(t.TempDir(), "rules.yaml")
	for _, tc := range []struct{ bin, fn, labels, want string }{
		{prog, "handle", "{status: {param: code}, route: {param: path}}", ""},
		{prog, "handle", "{status: {param: status}}", "rules.yaml:3:20: label status: handle in " + prog + " has no parameter status (its parameters: code, path, n)"},
		{prog, "after_pair", "{code: {param: code}}", "rules.yaml:3:18: label code: after_pair in " + prog + ": parameter code: it follows p (struct pair)"},
		{bare, "handle", "{status: {param: code}}", "rules.yaml:3:20: label status: no DWARF for handle in " + bare + ": name arguments by position, argN"},
		{prog, "handle", "{status: {param: 2x}}", "param must be a parameter's name"},
		{prog, "handle", "{status: {param: code, ptr: arg1}}", "unknown"},
	} {
		text := "- binary: " + tc.bin + "\n  function: " + tc.fn + "\n  labels: " + tc.labels + "\n"
		targets, err := decode(t, file, text)
		if tc.want == "" {
			if err != nil {
				t.Errorf("%s: %v", tc.labels, err)
			} else if op := targets[0].LabelOperands[1]; op.Param != "path" || op.Reg != -1 {
				t.Errorf("%s: operand %+v, want param path not yet placed", tc.labels, op)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: got %v, want %s", tc.labels, err, tc.want)
		}
	}
}

// TestReadParamsCorrupt reads the parameters of paramsprog built with -g
// after overwriting bytes of its .debug_info and .debug_abbrev (offsets,
// sizes, tags, links between entries): every read returns, without a
// panic, a table or an error.
func TestReadParamsCorrupt(t *testing.T) {
	prog := buildParamsProg(t, "paramsprog", "-O2", "-g")
	f, _ := readParams(t, prog)
	raw, err := os.ReadFile(prog)
	if err != nil {
		t.Fatal(err)
	}
	ef, err := elf.NewFile(bytes.NewReader(raw))
	if err != nil {
		t.Fatal(err)
	}
	var spans [][2]uint64
	for _, name := range []string{".debug_info", ".debug_abbrev"} {
		if s := ef.Section(name); s != nil && s.Flags&elf.SHF_COMPRESSED == 0 {
			spans = append(spans, [2]uint64{s.Offset, s.Size})
		}
	}
	if len(spans) == 0 {
		t.Skip("gcc wrote compressed DWARF sections")
	}
	rng := rand.New(rand.NewPCG(1, 2))
	buf := make([]byte, len(raw))
	for i := 0; i < 300; i++ {
		copy(buf, raw)
		for j := 0; j < 1+i%8; j++ {
			s := spans[rng.IntN(len(spans))]
			buf[s[0]+rng.Uint64N(s[1])] = byte(rng.IntN(256))
		}
		if p, err := ReadParams(bytes.NewReader(buf), &Binary{Funcs: f}); err == nil {
			for k := range f.Funcs {
				if sp := p.Lookup(&f.Funcs[k]); sp != nil {
					PlaceParams(sp, f.Arch)
				}
			}
		}
	}
}

// TestPlaceGoParams places the parameters of testdata/argsgo's
// main.handle(code int, path string) by Go's register ABI, as TestArgsGo
// names them by position: code in rax (arg0), path's pointer and length
// in rbx and rcx (arg1, arg2); its results are not parameters.
func TestPlaceGoParams(t *testing.T) {
	gobin := needGo(t)
	prog := filepath.Join(t.TempDir(), "argsgo")
	if out, err := exec.Command(gobin, "build", "-o", prog, "./testdata/argsgo").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v: %s", err, out)
	}
	f, p := readParams(t, prog)
	if f.Arch != funcs.ArchAMD64 {
		t.Skip("parameters are placed by the x86-64 rules in this test")
	}
	got, err := resolveParams([]Operand{{Param: "path", Reg: -1}, {Param: "code", Reg: -1}}, p, findFunc(t, f, "main.handle"), prog, true, f.Arch)
	if err != nil {
		t.Fatal(err)
	}
	want := []Operand{
		{Kind: OperandPtrLen, Reg: 1, LenReg: 2, Text: "{ptr: arg1, len: arg2}", Param: "path"},
		{Kind: OperandInt, Reg: 0, Size: 8, Signed: true, Text: "arg0.s64", Param: "code"},
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("operand %d: got %+v, want %+v", i, got[i], want[i])
		}
	}
	if _, err := resolveParams([]Operand{{Param: "err", Reg: -1}}, p, findFunc(t, f, "main.handle"), prog, true, f.Arch); err == nil || !strings.Contains(err.Error(), "has no parameter err (its parameters: code, path") {
		t.Errorf("a result by name: got %v, want no such parameter", err)
	}

	// Its named results, as error: reads them at the return: n in rax,
	// err (an interface) in rbx and rcx, read as its type word.
	got, err = resolveResults([]Operand{{Param: "err", Reg: -1}, {Kind: OperandInt, Reg: 0, Size: 4, Signed: true, Text: "ret.s32"}, {Param: "n", Reg: -1}}, p, findFunc(t, f, "main.handle"), prog, true, f.Arch)
	if err != nil {
		t.Fatal(err)
	}
	want = []Operand{
		{Kind: OperandInt, Reg: 1, Size: 8, Text: "ret1.u64", Param: "err"},
		{Kind: OperandInt, Reg: 0, Size: 4, Signed: true, Text: "ret.s32"},
		{Kind: OperandInt, Reg: 0, Size: 8, Signed: true, Text: "ret0.s64", Param: "n"},
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("result %d: got %+v, want %+v", i, got[i], want[i])
		}
	}
	for _, tc := range []struct{ fn, result, want string }{
		{"main.handle", "code", "main.handle in " + prog + " has no result named code (its named results: n, err)"},
		{"main.serve", "x", "main.serve in " + prog + " has no result named x (its named results: none)"},
	} {
		if _, err := resolveResults([]Operand{{Param: tc.result, Reg: -1}}, p, findFunc(t, f, tc.fn), prog, true, f.Arch); err == nil || err.Error() != tc.want {
			t.Errorf("%s %s: got %v, want %s", tc.fn, tc.result, err, tc.want)
		}
	}
	cprog := buildParamsProg(t, "paramsprog", "-O2", "-g")
	cf, cp := readParams(t, cprog)
	if _, err := resolveResults([]Operand{{Param: "r", Reg: -1}}, cp, findFunc(t, cf, "handle"), cprog, false, cf.Arch); err == nil || !strings.Contains(err.Error(), "only Go functions name their results") {
		t.Errorf("a C result by name: got %v, want refused", err)
	}

	// spanwatch check places them too, at the name in the predicate.
	file := filepath.Join(t.TempDir(), "rules.yaml")
	if _, err := decode(t, file, "- binary: "+prog+"\n  function: main.handle\n  error: n < 0 or err != 0\n"); err != nil {
		t.Errorf("error by named results: %v", err)
	}
	if _, err := decode(t, file, "- binary: "+prog+"\n  function: main.handle\n  error: n < 0 or errr != 0\n"); err == nil || !strings.Contains(err.Error(), "rules.yaml:3:19: "+prog+": error: main.handle in "+prog+" has no result named errr (its named results: n, err)") {
		t.Errorf("an unknown result: got %v", err)
	}
}
