package funcs

import (
	"bufio"
	"bytes"
	"context"
	"debug/elf"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/spanwatch/spanwatch/internal/glob"
	"github.com/spanwatch/spanwatch/internal/usdt"
)

// objdumpRets is the independent oracle: the addresses objdump -d shows a
// return instruction at (ret, repz ret, retaa, ...), between start and
// stop (0, 0: the whole file).
func objdumpRets(t *testing.T, objdump, bin string, start, stop uint64) map[uint64]bool {
	t.Helper()
	args := []string{"-d", "--no-show-raw-insn"}
	if stop != 0 {
		args = append(args, fmt.Sprintf("--start-address=%#x", start), fmt.Sprintf("--stop-address=%#x", stop))
	}
	out, err := exec.Command(objdump, append(args, bin)...).Output()
	if err != nil {
		t.Fatalf("%s %v: %v", objdump, args, err)
	}
	rets := map[uint64]bool{}
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		addr, rest, ok := strings.Cut(sc.Text(), ":\t")
		if !ok {
			continue
		}
		a, err := strconv.ParseUint(strings.TrimSpace(addr), 16, 64)
		if err != nil {
			continue
		}
		words := strings.Fields(rest)
		for len(words) > 1 && (words[0] == "rep" || words[0] == "repz" || words[0] == "bnd" || words[0] == "notrack") {
			words = words[1:]
		}
		if len(words) > 0 && (words[0] == "ret" || words[0] == "retq" || words[0] == "retaa" || words[0] == "retab") {
			rets[a] = true
		}
	}
	return rets
}

// retAddrs returns fn's return sites as virtual addresses (they are in
// the segment of its entry in the test's binaries).
func retAddrs(fn *Func) []uint64 {
	var out []uint64
	for _, off := range fn.Returns {
		out = append(out, off-fn.Offset+fn.Addr)
	}
	return out
}

// inRange returns the sorted addresses of rets in [start, end).
func inRange(rets map[uint64]bool, start, end uint64) []uint64 {
	var out []uint64
	for a := range rets {
		if a >= start && a < end {
			out = append(out, a)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out
}

func byName(f *File) map[string]*Func {
	m := map[string]*Func{}
	for i := range f.Funcs {
		m[f.Funcs[i].DisplayName()] = &f.Funcs[i]
	}
	return m
}

func tally(f *File) map[Reason]int {
	m := map[Reason]int{}
	for _, fn := range f.Funcs {
		m[fn.Refused]++
	}
	return m
}

// checkAgainstObjdump compares the return sites of every traceable
// function of bin with objdump's, and returns how many functions agreed.
func checkAgainstObjdump(t *testing.T, f *File, objdump, bin string) int {
	t.Helper()
	rets := objdumpRets(t, objdump, bin, 0, 0)
	n := 0
	for i := range f.Funcs {
		fn := &f.Funcs[i]
		if fn.Refused != "" {
			continue
		}
		want := inRange(rets, fn.Addr, fn.Addr+fn.Size)
		if got := retAddrs(fn); fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("%s: return sites %#x, objdump has %#x", fn.DisplayName(), got, want)
			continue
		}
		n++
	}
	return n
}

type cBuild struct {
	arch    Arch
	cc      string
	objdump string
}

func TestCProgram(t *testing.T) {
	for _, b := range []cBuild{
		{ArchAMD64, "x86_64-linux-gnu-gcc", "objdump"},
		{ArchARM64, "aarch64-linux-gnu-gcc", "aarch64-linux-gnu-objdump"},
	} {
		t.Run(string(b.arch), func(t *testing.T) {
			cc, err := exec.LookPath(b.cc)
			if err != nil && b.arch == ArchAMD64 && runtime.GOARCH == "amd64" {
				cc, err = exec.LookPath("gcc")
			}
			if err != nil {
				t.Skipf("no %s on PATH (install gcc, or gcc-aarch64-linux-gnu)", b.cc)
			}
			objdump, err := exec.LookPath(b.objdump)
			if err != nil {
				t.Skipf("no %s on PATH: install binutils (binutils-aarch64-linux-gnu)", b.objdump)
			}
			dir := t.TempDir()
			bin := filepath.Join(dir, "retprog")
			if out, err := exec.Command(cc, "-O2", "-o", bin, "testdata/retprog.c").CombinedOutput(); err != nil {
				t.Fatalf("%s: %v: %s", cc, err, out)
			}
			stripped := bin + ".stripped"
			if out, err := exec.Command(cc, "-O2", "-s", "-o", stripped, "testdata/retprog.c").CombinedOutput(); err != nil {
				t.Fatalf("%s -s: %v: %s", cc, err, out)
			}

			f, err := Open(context.Background(), bin, Options{})
			if err != nil {
				t.Fatal(err)
			}
			if f.Arch != b.arch || f.Go {
				t.Fatalf("arch %s, go %v", f.Arch, f.Go)
			}
			fns := byName(f)
			mr, tc := fns["multi_ret"], fns["tail_call"]
			if mr == nil || tc == nil {
				t.Fatalf("multi_ret or tail_call not listed: %v", fns)
			}
			if mr.Refused != "" || len(mr.Returns) != 5 || mr.Source != SourceSymtab {
				t.Errorf("multi_ret: %+v, want 5 return sites from .symtab", *mr)
			}
			if want := inRange(objdumpRets(t, objdump, bin, mr.Addr, mr.Addr+mr.Size), mr.Addr, mr.Addr+mr.Size); fmt.Sprint(retAddrs(mr)) != fmt.Sprint(want) {
				t.Errorf("multi_ret: return sites %#x, objdump has %#x", retAddrs(mr), want)
			}
			if leaf := fns["leaf"]; leaf == nil || tc.Refused != ReasonTailCall || !strings.Contains(tc.Detail, fmt.Sprintf("to %#x, outside the function", leaf.Addr)) {
				t.Errorf("tail_call: refused %q (%s), want %s to leaf", tc.Refused, tc.Detail, ReasonTailCall)
			}
			agreed := checkAgainstObjdump(t, f, objdump, bin)
			t.Logf("%s: %d functions, %d traceable with return sites equal to objdump's, refused %v", b.arch, len(f.Funcs), agreed, tally(f))

			// The same program without .symtab: multi_ret is found by
			// its frame description alone, unnamed, with the same returns.
			s, err := Open(context.Background(), stripped, Options{Filter: mustGlob(t, fmt.Sprintf("%#x", mr.Addr))})
			if err != nil {
				t.Fatal(err)
			}
			if len(s.Funcs) != 1 || s.Funcs[0].Source != SourceEHFrame || s.Funcs[0].Name != "" || fmt.Sprint(s.Funcs[0].Returns) != fmt.Sprint(mr.Returns) {
				t.Errorf("stripped, by address %#x: %+v, want multi_ret's returns %#x from .eh_frame", mr.Addr, s.Funcs, mr.Returns)
			}

			// The filter.
			g, err := Open(context.Background(), bin, Options{Filter: mustGlob(t, "*_ret*")})
			if err != nil {
				t.Fatal(err)
			}
			if len(g.Funcs) != 1 || g.Funcs[0].Name != "multi_ret" {
				t.Errorf("--filter '*_ret*': %+v, want multi_ret alone", g.Funcs)
			}
			// The cap on return sites.
			c, err := Open(context.Background(), bin, Options{Filter: mustGlob(t, "multi_ret"), MaxReturns: 4})
			if err != nil {
				t.Fatal(err)
			}
			if fn := c.Funcs[0]; fn.Refused != ReasonTooManyReturns || fn.Detail != "5 return sites, cap 4" || fn.Returns != nil {
				t.Errorf("multi_ret with a cap of 4: %+v", fn)
			}
		})
	}
}

func mustGlob(t *testing.T, p string) *glob.Glob {
	t.Helper()
	g, err := glob.Compile(p)
	if err != nil {
		t.Fatal(err)
	}
	return g
}

// TestPostgres lists Debian's PostgreSQL 15 server, which has no .symtab:
// exec_simple_query, a static function, is found by its frame description
// as the function holding the query__start probe, with its return site
// (its unlikely paths, moved to a .cold part, end in calls that do not
// return).
func TestPostgres(t *testing.T) {
	const bin = "/usr/lib/postgresql/15/bin/postgres"
	if _, err := os.Stat(bin); err != nil {
		t.Skip("no " + bin + ": install postgresql-15")
	}
	objdump, err := exec.LookPath("objdump")
	if err != nil {
		t.Skip("no objdump: install binutils")
	}
	f, err := Open(context.Background(), bin, Options{})
	if err != nil {
		t.Fatal(err)
	}
	src := map[Source]int{}
	for _, fn := range f.Funcs {
		src[fn.Source]++
	}
	t.Logf("postgres: %d functions (%v), refused %v", len(f.Funcs), src, tally(f))
	if pm := byName(f)["PostgresMain"]; pm == nil || pm.Source != SourceDynsym {
		t.Errorf("PostgresMain: %+v, want it from .dynsym", pm)
	}

	u, err := usdt.Open(bin)
	if err != nil {
		t.Fatal(err)
	}
	probes := u.Lookup("postgresql", "query__start")
	if len(probes) != 1 {
		t.Fatalf("query__start: %d sites, want 1", len(probes))
	}
	var esq *Func
	for i := range f.Funcs {
		fn := &f.Funcs[i]
		if probes[0].Address >= fn.Addr && probes[0].Address-fn.Addr < fn.Size {
			esq = fn
		}
	}
	if esq == nil {
		t.Fatalf("no function holds query__start at %#x", probes[0].Address)
	}
	if esq.Source != SourceEHFrame || esq.Refused != "" || len(esq.Returns) == 0 {
		t.Fatalf("exec_simple_query: %+v, want an unnamed traceable function", *esq)
	}
	want := inRange(objdumpRets(t, objdump, bin, esq.Addr, esq.Addr+esq.Size), esq.Addr, esq.Addr+esq.Size)
	if got := retAddrs(esq); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("exec_simple_query: return sites %#x, objdump has %#x", got, want)
	}
	t.Logf("exec_simple_query at %#x (%d bytes, file offset %#x): return sites %#x", esq.Addr, esq.Size, esq.Offset, esq.Returns)

	// Every traceable function's return sites against objdump's, in
	// its own range (a function with a .cold part may have more).
	rets := objdumpRets(t, objdump, bin, 0, 0)
	agreed, withParts := 0, 0
	for i := range f.Funcs {
		fn := &f.Funcs[i]
		if fn.Refused != "" {
			continue
		}
		var own []uint64
		for _, a := range retAddrs(fn) {
			if a >= fn.Addr && a-fn.Addr < fn.Size {
				own = append(own, a)
			}
		}
		if len(own) != len(fn.Returns) {
			withParts++
		}
		if want := inRange(rets, fn.Addr, fn.Addr+fn.Size); fmt.Sprint(own) != fmt.Sprint(want) {
			t.Errorf("%s: return sites %#x, objdump has %#x", fn.DisplayName(), own, want)
			continue
		}
		agreed++
	}
	t.Logf("postgres: %d traceable functions' return sites equal objdump's (%d also return from a .cold part)", agreed, withParts)
}

// TestPrometheus lists Debian's prometheus, a stripped Go binary (Go 1.19,
// externally linked, so its Go code does not start at .text) by its
// pclntab, and checks the return sites of its promql package's functions
// against objdump's.
func TestPrometheus(t *testing.T) {
	const bin = "/usr/bin/prometheus"
	if _, err := os.Stat(bin); err != nil {
		t.Skip("no " + bin + ": install prometheus")
	}
	objdump, err := exec.LookPath("objdump")
	if err != nil {
		t.Skip("no objdump: install binutils")
	}
	f, err := Open(context.Background(), bin, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if !f.Go || f.Arch != ArchAMD64 {
		t.Fatalf("go %v, arch %s", f.Go, f.Arch)
	}
	if !strings.HasPrefix(f.GoVersion, "go1.19") {
		t.Errorf("Go version %q, want Debian 12's go1.19", f.GoVersion)
	}
	checked := 0
	for _, fn := range f.Funcs {
		if fn.EntryAfter == EntryAfterStackCheck {
			checked++
		}
	}
	if e := byName(f)["github.com/prometheus/prometheus/promql.(*Engine).exec"]; e == nil || e.EntryAfter != EntryAfterStackCheck || e.Entry != e.Offset+18 {
		t.Errorf("promql.(*Engine).exec: %+v, want its entry 18 bytes in, after LEAQ, CMPQ R12, 16(R14) and JBE", e)
	}
	t.Logf("prometheus (%s): %d functions from the pclntab, %d begin with a stack check, refused %v", f.GoVersion, len(f.Funcs), checked, tally(f))
	if len(f.Funcs) < 10000 {
		t.Errorf("%d functions, want the tens of thousands of a Go server", len(f.Funcs))
	}
	fns := byName(f)
	for _, name := range []string{"main.main", "runtime.mallocgc", "github.com/prometheus/prometheus/promql.(*Engine).exec"} {
		if fn := fns[name]; fn == nil || fn.Refused != "" || len(fn.Returns) == 0 {
			t.Errorf("%s: %+v, want it traceable", name, fn)
		}
	}

	p, err := Open(context.Background(), bin, Options{Filter: mustGlob(t, "github.com/prometheus/prometheus/promql.*")})
	if err != nil {
		t.Fatal(err)
	}
	start, end := ^uint64(0), uint64(0)
	for _, fn := range p.Funcs {
		start, end = min(start, fn.Addr), max(end, fn.Addr+fn.Size)
	}
	rets := objdumpRets(t, objdump, bin, start, end)
	agreed := 0
	for i := range p.Funcs {
		fn := &p.Funcs[i]
		if fn.Refused != "" {
			continue
		}
		if want := inRange(rets, fn.Addr, fn.Addr+fn.Size); fmt.Sprint(retAddrs(fn)) != fmt.Sprint(want) {
			t.Errorf("%s: return sites %#x, objdump has %#x", fn.Name, retAddrs(fn), want)
			continue
		}
		agreed++
	}
	t.Logf("promql.*: %d functions, %d traceable with return sites equal to objdump's, refused %v", len(p.Funcs), agreed, tally(p))
	if agreed < 100 {
		t.Errorf("%d promql functions agreed with objdump, want hundreds", agreed)
	}
}

// TestHostileInput: truncated and corrupted copies of a real binary give
// errors or listings, never a panic or a read past a cap.
func TestHostileInput(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(exe)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range []int{0, 16, 64, 1 << 10, 1 << 16, len(b) / 2, len(b) - 1} {
		Parse(bytes.NewReader(b[:n]), Options{})
	}
	c := bytes.Clone(b)
	for i := 0; i < 2000; i++ {
		// Corrupt the headers and tables, deterministically.
		off := (i * 7919) % min(len(c), 1<<20)
		c[off] ^= byte(i*31 + 1)
		if i%100 == 99 {
			Parse(bytes.NewReader(c), Options{Filter: mustGlob(t, "runtime.m*")})
		}
	}
}

// TestGoText lists Go programs built by the test, internally and
// externally linked (as cgo programs are), with .symtab stripped: the
// functions found in the pclntab are where the unstripped binary's
// symbols say. An externally linked binary's Go text does not start at
// .text, and newer linkers leave the pclntab header's text start 0.
func TestGoText(t *testing.T) {
	gobin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go tool on PATH")
	}
	if _, err := exec.LookPath("strip"); err != nil {
		t.Skip("no strip: install binutils")
	}
	dir := t.TempDir()
	for _, link := range []string{"internal", "external"} {
		t.Run(link, func(t *testing.T) {
			bin := filepath.Join(dir, "goprog-"+link)
			cmd := exec.Command(gobin, "build", "-ldflags=-linkmode="+link, "-o", bin, "./testdata/goprog")
			if out, err := cmd.CombinedOutput(); err != nil {
				if link == "external" {
					t.Skipf("go build -linkmode=external (needs cgo and a C compiler): %v: %s", err, out)
				}
				t.Fatalf("go build: %v: %s", err, out)
			}
			want := map[string]uint64{}
			syms, err := symtabFuncs(bin)
			if err != nil {
				t.Fatal(err)
			}
			for name, addr := range syms {
				want[name] = addr
			}
			stripped := bin + ".stripped"
			if out, err := exec.Command("strip", "--strip-all", "-o", stripped, bin).CombinedOutput(); err != nil {
				t.Fatalf("strip: %v: %s", err, out)
			}
			f, err := Open(context.Background(), stripped, Options{})
			if err != nil {
				t.Fatal(err)
			}
			if !f.Go {
				t.Fatalf("%s: not listed from its pclntab", stripped)
			}
			// Names the pclntab gives twice (an assembly function and its
			// ABI wrapper, both "runtime.reflectcall") are left out.
			seen := map[string]int{}
			for _, fn := range f.Funcs {
				seen[fn.Name]++
			}
			agreed := 0
			for _, fn := range f.Funcs {
				addr, ok := want[fn.Name]
				if !ok || seen[fn.Name] > 1 {
					continue
				}
				if fn.Addr != addr {
					t.Errorf("%s at %#x, .symtab of the unstripped binary says %#x", fn.Name, fn.Addr, addr)
					continue
				}
				agreed++
			}
			if w := byName(f)["main.work"]; w == nil || w.Refused != "" || w.Addr != want["main.work"] {
				t.Errorf("main.work: %+v, want it traceable at %#x", w, want["main.work"])
			}
			// main.work is a leaf with a small frame: no stack check.
			if w := byName(f)["main.work"]; w != nil && (w.EntryAfter != "" || w.Entry != w.Offset) {
				t.Errorf("main.work: entry %#x (%q), first instruction %#x: want the first instruction", w.Entry, w.EntryAfter, w.Offset)
			}
			if m := byName(f)["main.main"]; m == nil || m.EntryAfter != EntryAfterStackCheck || m.Entry <= m.Offset {
				t.Errorf("main.main: %+v, want its entry after the stack check", m)
			}
			if f.GoVersion != runtime.Version() {
				t.Errorf("Go version %q, want %q", f.GoVersion, runtime.Version())
			}
			t.Logf("%s linking: %d functions at the addresses .symtab gives", link, agreed)
			if agreed < 1000 {
				t.Errorf("%d functions agreed, want the thousand or so of a Go program", agreed)
			}
		})
	}
}

// symtabFuncs returns the function symbols of bin's .symtab by name,
// those whose name it gives once.
func symtabFuncs(bin string) (map[string]uint64, error) {
	ef, err := elf.Open(bin)
	if err != nil {
		return nil, err
	}
	defer ef.Close()
	syms, err := ef.Symbols()
	if err != nil {
		return nil, err
	}
	out, n := map[string]uint64{}, map[string]int{}
	for _, s := range syms {
		if elf.ST_TYPE(s.Info) == elf.STT_FUNC && s.Value != 0 {
			out[s.Name] = s.Value
			n[s.Name]++
		}
	}
	for name, c := range n {
		if c > 1 {
			delete(out, name) // a name given twice: no oracle
		}
	}
	return out, nil
}

// TestGoStackCheck finds the stack check a Go function (register ABI)
// begins with, in the three forms Go 1.26's compiler wrote for functions
// of a small, a larger and a past-StackBig frame, and no check where the
// code is something else. Each code is padded to 0x200 bytes so the jumps
// land inside it.
func TestGoStackCheck(t *testing.T) {
	pad := func(b ...byte) []byte { return append(b, make([]byte, 0x200-len(b))...) }
	for _, tc := range []struct {
		name string
		code []byte
		want int
	}{
		// CMPQ SP, 16(R14); JBE +0xb0
		{"small frame", pad(0x49, 0x3b, 0x66, 0x10, 0x0f, 0x86, 0xb0, 0, 0, 0, 0x55), 10},
		// LEAQ -0x5a0(SP), R12; CMPQ R12, 16(R14); JBE +0x114
		{"larger frame", pad(0x4c, 0x8d, 0xa4, 0x24, 0x60, 0xfa, 0xff, 0xff, 0x4d, 0x3b, 0x66, 0x10, 0x0f, 0x86, 0x14, 0x01, 0, 0, 0x55), 18},
		// MOVQ SP, R12; SUBQ $0x3f88, R12; JB +0x10e; CMPQ R12, 16(R14); JBE +0x104
		{"past StackBig", pad(0x49, 0x89, 0xe4, 0x49, 0x81, 0xec, 0x88, 0x3f, 0, 0, 0x0f, 0x82, 0x0e, 0x01, 0, 0, 0x4d, 0x3b, 0x66, 0x10, 0x0f, 0x86, 0x04, 0x01, 0, 0, 0x55), 26},
		// PUSHQ BP: a NOSPLIT function
		{"no check", pad(0x55, 0x48, 0x89, 0xe5), 0},
		// CMPQ SP, 24(R14): not the stack guard
		{"other field", pad(0x49, 0x3b, 0x66, 0x18, 0x0f, 0x86, 0xb0, 0, 0, 0), 0},
		// CMPQ SP, 16(R14); JBE -0x100: out of the function
		{"jump out", pad(0x49, 0x3b, 0x66, 0x10, 0x0f, 0x86, 0x00, 0xff, 0xff, 0xff), 0},
		// LEAQ -0x5a0(SP), SP (writes SP) before the compare
		{"writes SP", pad(0x48, 0x8d, 0xa4, 0x24, 0x60, 0xfa, 0xff, 0xff, 0x49, 0x3b, 0x66, 0x10, 0x0f, 0x86, 0xb0, 0, 0, 0), 0},
	} {
		if got := goStackCheckAMD64(tc.code, 0x1000); got != tc.want {
			t.Errorf("%s: %d bytes of stack check, want %d", tc.name, got, tc.want)
		}
	}
}
