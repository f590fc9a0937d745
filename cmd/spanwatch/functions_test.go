package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// runCaptured runs spanwatch with args as main does and returns its exit
// code, what it printed on standard output (commands print there, not on
// run's writer) and on standard error.
func runCaptured(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	tmp, err := os.Create(filepath.Join(t.TempDir(), "stdout"))
	if err != nil {
		t.Fatal(err)
	}
	defer tmp.Close()
	saved := os.Stdout
	os.Stdout = tmp
	var errb bytes.Buffer
	code := run(args, &bytes.Buffer{}, &errb)
	os.Stdout = saved
	out, err := os.ReadFile(tmp.Name())
	if err != nil {
		t.Fatal(err)
	}
	return code, string(out), errb.String()
}

func TestFunctionsCommand(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("files are opened through internal/userfile, Linux only")
	}
	cc, err := exec.LookPath("cc")
	if err != nil {
		t.Skip("no C compiler (cc) on PATH: install build-essential")
	}
	bin := filepath.Join(t.TempDir(), "retprog")
	if out, err := exec.Command(cc, "-O2", "-o", bin, "../../internal/funcs/testdata/retprog.c").CombinedOutput(); err != nil {
		t.Fatalf("cc: %v: %s", err, out)
	}

	// Flags after the path filter (issue 27: probes took --filter for a
	// second path).
	code, out, errs := runCaptured(t, "functions", bin, "--filter", "*_*", "--json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	var l functionListing
	if err := json.Unmarshal([]byte(out), &l); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	got := map[string]functionSite{}
	for _, f := range l.Functions {
		got[f.Name] = f
	}
	if l.Path != bin || l.Go {
		t.Errorf("listing of %s, go %v", l.Path, l.Go)
	}
	if mr := got["multi_ret"]; mr.Refused != "" || len(mr.Returns) != 5 {
		t.Errorf("multi_ret: %+v, want 5 return sites", mr)
	}
	if tc := got["tail_call"]; tc.Refused != "tail_call" || !strings.Contains(tc.Detail, "outside the function") {
		t.Errorf("tail_call: %+v, want refused as a tail call", tc)
	}
	if _, ok := got["leaf"]; ok {
		t.Errorf("--filter '*_*' listed leaf")
	}

	// The table, flags before the path.
	code, out, errs = runCaptured(t, "functions", "-v", "--filter", "multi_ret", bin)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 4 || !strings.Contains(lines[0], "1 function: 1 traceable") ||
		!strings.Contains(lines[1], "parameters: unknown, no DWARF in the file and no separate debug file") ||
		!strings.Contains(lines[2], "FUNCTION") || !strings.HasPrefix(strings.TrimSpace(lines[3]), "multi_ret ") ||
		!strings.Contains(lines[3], " 5 ") || !strings.Contains(lines[3], "ok  returns at 0x") {
		t.Errorf("table:\n%s", out)
	}
	code, out, _ = runCaptured(t, "functions", "--filter", "tail_call", bin)
	if code != 0 || !strings.Contains(out, "refused: tail_call: jmp at 0x") {
		t.Errorf("exit %d, table:\n%s", code, out)
	}

	// An empty answer says so; a missing binary and a bad call fail.
	if code, _, errs := runCaptured(t, "functions", bin, "--filter", "nothing*"); code != 1 || !strings.Contains(errs, `no function matches "nothing*"`) {
		t.Errorf("no match: exit %d, %q", code, errs)
	}
	if code, _, errs := runCaptured(t, "functions", bin+".missing"); code != 1 || !strings.Contains(errs, "no such file") {
		t.Errorf("missing binary: exit %d, %q", code, errs)
	}
	if code, _, _ := runCaptured(t, "functions", bin, bin); code != 2 {
		t.Errorf("two binaries: exit %d, want 2", code)
	}
}

// TestFunctionsParams lists the parameters of a gcc -O2 -g program's
// functions from its DWARF: their types and the argument each is read
// as, or why it is not.
func TestFunctionsParams(t *testing.T) {
	if runtime.GOOS != "linux" || runtime.GOARCH != "amd64" {
		t.Skip("files are opened through internal/userfile, Linux only; parameters are placed by the x86-64 rules here")
	}
	cc, err := exec.LookPath("gcc")
	if err != nil {
		t.Skip("no gcc on PATH: install build-essential")
	}
	bin := filepath.Join(t.TempDir(), "paramsprog")
	if out, err := exec.Command(cc, "-O2", "-g", "-o", bin, "../../source/function/testdata/paramsprog.c").CombinedOutput(); err != nil {
		t.Fatalf("gcc: %v: %s", err, out)
	}
	code, out, errs := runCaptured(t, "functions", "--json", "--filter", "with_float", bin)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	var l functionListing
	if err := json.Unmarshal([]byte(out), &l); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	want := []functionParam{
		{Name: "x", Type: "double", Refused: "is a floating-point value, passed in a vector register (or on the stack), which is not read"},
		{Name: "flags", Type: "unsigned int", Arg: "arg0.u32"},
		{Name: "lv", Type: "enum level", Arg: "arg1.u32"},
		{Name: "port", Type: "port_t", Arg: "arg2.u16"},
		{Name: "buf", Type: "unsigned char *", Arg: "{ptr: arg3}"},
	}
	if !l.DWARF || len(l.Functions) != 1 || fmt.Sprint(l.Functions[0].Params) != fmt.Sprint(want) {
		t.Errorf("dwarf %v, functions %+v, want with_float's parameters %+v", l.DWARF, l.Functions, want)
	}
	code, out, errs = runCaptured(t, "functions", "--filter", "handle", bin)
	if code != 0 || !strings.Contains(out, "(int code: arg0.s32, const char *path: {ptr: arg1}, long int n: arg2.s64)") {
		t.Errorf("exit %d (%s), table:\n%s", code, errs, out)
	}
}

// TestFunctionsDebugFile lists a gcc -O2 -g program split as dh_strip
// splits it (its DWARF and .symtab in a debug file, named by the
// binary's .gnu_debuglink, beside it): handle is named by the debug
// file's .symtab, its parameters read from its DWARF, and the listing
// says where both came from. With the debug file of another build there,
// it says why that one was refused.
func TestFunctionsDebugFile(t *testing.T) {
	if runtime.GOOS != "linux" || runtime.GOARCH != "amd64" {
		t.Skip("files are opened through internal/userfile, Linux only; parameters are placed by the x86-64 rules here")
	}
	for _, tool := range []string{"gcc", "objcopy", "strip"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("no %s on PATH: install build-essential and binutils", tool)
		}
	}
	dir := t.TempDir()
	bin := filepath.Join(dir, "paramsprog")
	dbg := bin + ".debug"
	for _, argv := range [][]string{
		{"gcc", "-O2", "-g", "-o", bin, "../../source/function/testdata/paramsprog.c"},
		{"objcopy", "--only-keep-debug", "--compress-debug-sections", bin, dbg},
		{"strip", "--remove-section=.comment", "--remove-section=.note", "--strip-unneeded", bin},
		{"objcopy", "--add-gnu-debuglink=" + dbg, bin},
	} {
		if out, err := exec.Command(argv[0], argv[1:]...).CombinedOutput(); err != nil {
			t.Fatalf("%v: %v: %s", argv, err, out)
		}
	}
	code, out, errs := runCaptured(t, "functions", "--filter", "handle", bin)
	if code != 0 || !strings.Contains(out, "symbols: .symtab of the debug file "+dbg+" (found by .gnu_debuglink)") ||
		!strings.Contains(out, "parameters: from DWARF of the debug file "+dbg+" (found by .gnu_debuglink)") ||
		!strings.Contains(out, "(int code: arg0.s32, const char *path: {ptr: arg1}, long int n: arg2.s64)") {
		t.Errorf("exit %d (%s), table:\n%s", code, errs, out)
	}

	// Another build's debug file in its place.
	other := filepath.Join(dir, "other")
	for _, argv := range [][]string{
		{"gcc", "-O2", "-g", "-fno-inline", "-o", other, "../../source/function/testdata/paramsprog.c"},
		{"objcopy", "--only-keep-debug", "--compress-debug-sections", other, dbg},
	} {
		if out, err := exec.Command(argv[0], argv[1:]...).CombinedOutput(); err != nil {
			t.Fatalf("%v: %v: %s", argv, err, out)
		}
	}
	code, out, errs = runCaptured(t, "functions", "--json", bin)
	var l functionListing
	if err := json.Unmarshal([]byte(out), &l); code != 0 || err != nil {
		t.Fatalf("exit %d (%s), %v: %s", code, errs, err, out)
	}
	if l.DWARF || l.DebugFile != "" || len(l.DebugRefused) != 1 || !strings.HasPrefix(l.DebugRefused[0], dbg+": refused: its CRC32 ") ||
		!strings.HasPrefix(l.ParamsFrom, "no DWARF in the file and no separate debug file ("+dbg+": refused: its CRC32 ") {
		t.Errorf("dwarf %v, debug file %q, refused %q, params from %q; want the other build's debug file refused by its CRC", l.DWARF, l.DebugFile, l.DebugRefused, l.ParamsFrom)
	}
	for _, f := range l.Functions {
		if f.Name == "handle" {
			t.Errorf("handle named (%s) with the debug file refused", f.Source)
		}
	}
}
