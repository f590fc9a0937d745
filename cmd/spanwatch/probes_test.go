package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"

	"github.com/spanwatch/spanwatch/internal/glob"
)

// buildSDTProg builds the USDT test program and its library from
// internal/usdt/testdata, or skips when cc or sys/sdt.h is missing.
func buildSDTProg(t *testing.T) (prog, lib string) {
	t.Helper()
	if runtime.GOOS != "linux" || runtime.GOARCH != "amd64" {
		t.Skip("the test programs' probes are written for x86-64 Linux")
	}
	cc, err := exec.LookPath("cc")
	if err != nil {
		t.Skip("no C compiler (cc) on PATH: install build-essential")
	}
	if _, err := os.Stat("/usr/include/x86_64-linux-gnu/sys/sdt.h"); err != nil {
		t.Skip("no sys/sdt.h: install systemtap-sdt-dev")
	}
	dir := t.TempDir()
	src := "../../internal/usdt/testdata/"
	lib = filepath.Join(dir, "libsdtlib.so")
	prog = filepath.Join(dir, "sdtprog")
	for _, args := range [][]string{
		{"-O2", "-fPIC", "-shared", "-o", lib, src + "sdtlib.c"},
		{"-O2", "-o", prog, src + "sdtprog.c", src + "sdtsem.c", src + "sdtnop5.c", "-L" + dir, "-lsdtlib", "-Wl,-rpath," + dir},
	} {
		if out, err := exec.Command(cc, args...).CombinedOutput(); err != nil {
			t.Fatalf("cc %v: %v: %s", args, err, out)
		}
	}
	return prog, lib
}

func decodeListings(t *testing.T, b []byte) map[string]probeListing {
	t.Helper()
	var ls []probeListing
	if err := json.Unmarshal(b, &ls); err != nil {
		t.Fatalf("%v: %s", err, b)
	}
	m := map[string]probeListing{}
	for _, l := range ls {
		m[filepath.Base(l.Path)] = l
	}
	return m
}

func TestProbesCommand(t *testing.T) {
	prog, lib := buildSDTProg(t)

	var out bytes.Buffer
	if err := listProbes(&out, []string{prog, lib}, 0, nil, true, true); err != nil {
		t.Fatal(err)
	}
	ls := decodeListings(t, out.Bytes())
	if n := len(ls["sdtprog"].Probes); n != 22 {
		t.Errorf("sdtprog: %d sites, want 22", n)
	}
	fire := ls["libsdtlib.so"].Probes
	if len(fire) != 1 || fire[0].Provider != "swlib" || fire[0].Name != "fire" || len(fire[0].Parsed) != 3 {
		t.Errorf("libsdtlib.so: %+v, want swlib:fire with 3 parsed args", fire)
	}
	for _, p := range ls["sdtprog"].Probes {
		if (p.Name == "sem") != (p.Semaphore != "") {
			t.Errorf("%s:%s semaphore %q", p.Provider, p.Name, p.Semaphore)
		}
		if p.Name == "badarg" && !strings.Contains(p.ArgError, "thread-local") {
			t.Errorf("sw:badarg: arg_error %q", p.ArgError)
		}
		if p.Name == "asmargs" && strings.Join(p.Parsed, ", ") != "s8 %ah, u64 [%rdx + %rcx*8], s32 [%rdx+8 + %rcx*4], u16 %ax, u64 %rcx" {
			t.Errorf("asmargs parsed as %q", p.Parsed)
		}
	}

	// Text form, filtered.
	out.Reset()
	if err := listProbes(&out, []string{prog}, 0, mustGlob(t, "sw:consts"), false, true); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "sw:consts") || !strings.Contains(out.String(), "[u8 200, s8 -100, u16 60000") || strings.Contains(out.String(), "sw:a1") {
		t.Errorf("filtered listing:\n%s", out.String())
	}

	// --pid: the running program and the library it mapped.
	cmd := exec.Command(prog)
	stdin, _ := cmd.StdinPipe()
	stdout, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { stdin.Close(); cmd.Wait() }()
	if line, _ := bufio.NewReader(stdout).ReadString('\n'); !strings.HasPrefix(line, "ready") {
		t.Fatalf("program said %q", line)
	}
	out.Reset()
	if err := listProbes(&out, nil, cmd.Process.Pid, nil, true, false); err != nil {
		t.Fatal(err)
	}
	ls = decodeListings(t, out.Bytes())
	root := "/proc/" + strconv.Itoa(cmd.Process.Pid) + "/root"
	if l, ok := ls["sdtprog"]; !ok || l.Path != root+prog || len(l.Probes) != 22 {
		t.Errorf("--pid: executable listing %+v, want %s with 22 sites", l, root+prog)
	}
	if l, ok := ls["libsdtlib.so"]; !ok || l.Path != root+lib || len(l.Probes) != 1 {
		t.Errorf("--pid: library listing %+v, want %s with 1 site", l, root+lib)
	}
	if len(ls) != 2 {
		t.Errorf("--pid listed %d files, want the program and its library", len(ls))
	}
}

func TestProbesCommandErrors(t *testing.T) {
	var stdout, stderr bytes.Buffer
	if code := run([]string{"probes"}, &stdout, &stderr); code != 2 || !strings.Contains(stderr.String(), "give PATH... or --pid PID") {
		t.Errorf("no arguments: exit %d, %q", code, stderr.String())
	}
	stderr.Reset()
	exe, _ := os.Executable()
	if code := run([]string{"probes", exe}, &stdout, &stderr); code != 1 || !strings.Contains(stderr.String(), "no USDT probes") {
		t.Errorf("binary without probes: exit %d, %q", code, stderr.String())
	}
	// The flag is read wherever it stands: after the path too.
	for _, args := range [][]string{{"probes", "--filter", `app:\`, exe}, {"probes", exe, "--filter", `app:\`}} {
		stderr.Reset()
		if code := run(args, &stdout, &stderr); code != 2 || !strings.Contains(stderr.String(), "bad --filter") {
			t.Errorf("%q: exit %d, %q, want the bad filter refused", args, code, stderr.String())
		}
	}
}

// TestProbesPidEmpty checks that a process without probes gets an answer
// that says so, not an empty output.
func TestProbesPidEmpty(t *testing.T) {
	cmd := exec.Command("sleep", "60")
	if err := cmd.Start(); err != nil {
		t.Skip(err)
	}
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	var out bytes.Buffer
	if err := listProbes(&out, nil, cmd.Process.Pid, nil, false, false); err != nil {
		t.Fatal(err)
	}
	want := "process " + strconv.Itoa(cmd.Process.Pid) + ": no USDT probes in its executable or its "
	if !strings.HasPrefix(out.String(), want) {
		t.Errorf("probes --pid of sleep(1): %q, want %q...", out.String(), want)
	}
	out.Reset()
	if err := listProbes(&out, nil, cmd.Process.Pid, nil, true, false); err != nil || strings.TrimSpace(out.String()) != "[]" {
		t.Errorf("--json: %q, %v; want []", out.String(), err)
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
