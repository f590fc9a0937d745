//go:build linux && (amd64 || arm64)

package usdt

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/cilium/ebpf/features"
	"github.com/cilium/ebpf/ringbuf"
	"github.com/cilium/ebpf/rlimit"
)

// requireBPF skips unless the test can load and attach BPF programs.
func requireBPF(t testing.TB) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root (CAP_BPF, CAP_PERFMON) to load BPF and attach uprobes")
	}
	if err := rlimit.RemoveMemlock(); err != nil {
		t.Fatalf("remove memlock rlimit as root: %v", err)
	}
}

// The values sdtprog.c passes, widened to 64 bits the way their C types
// are: V0..V11 are u8, s8, u16, s16, u32, s32, u64, s64, s8, s16, s32, s64.
var sdtValues = []uint64{
	200,
	u(-100),
	60000,
	u(-30000),
	4000000000,
	u(-2000000000),
	0xfedcba9876543210,
	u(-5000000000123),
	u(-1),
	u(-2),
	u(-3),
	u(-4),
}

func u(v int64) uint64 { return uint64(v) }

// asmArgs are the values of sdtprog.c's sw:asmargs, whose argument
// string is written in each architecture's assembly.
var asmArgs = map[string][]uint64{
	// -1@%ah -> 0x88, 8@(%rdx,%rcx,8) and -4@8(%rdx,%rcx,4) -> g_arr[2],
	// 2@%ax, 8@%rcx.
	"amd64": {u(-120), u(-30), u(-30), 0x8899, 2},
	// 8@x1, -4@w1, 8@[x2, -8], 8@[x2] and 8@[x2, 8] -> g_arr[0..2],
	// -2@[sp, 8] -> -300, -4@-42, -1@x3 -> the low byte of -300.
	"arm64": {0x11223344fffffff6, u(-10), 10, 20, u(-30), u(-300), u(-42), u(-44)},
}

// expectedArgs gives the argument values each probe's sites carry; probes
// with several sites (sw:inl) list one tuple per site, in any order.
func expectedArgs() map[string][][]uint64 {
	m := map[string][][]uint64{}
	for n := 0; n <= 12; n++ {
		m[fmt.Sprintf("sw:a%d", n)] = [][]uint64{sdtValues[:n]}
	}
	m["sw:consts"] = [][]uint64{sdtValues[:8]}
	m["sw:mem"] = [][]uint64{sdtValues[:8]}
	m["sw:inl"] = [][]uint64{
		{u(-11), 11},
		{u(-22), 22},
		{u(-5000000000123), 4000000000},
	}
	m["sw:asmargs"] = [][]uint64{asmArgs[runtime.GOARCH]}
	m["sw:sem"] = [][]uint64{{u(-777), 0x1122334455667788}}
	n5 := []uint64{0xabcdef0123456789, u(-31337)}
	m["sw:nop5"] = [][]uint64{n5, n5, n5} // fired three times
	// The third argument is a pointer into the library: checked nonzero.
	m["swlib:fire"] = [][]uint64{{u(-123456789), u(-5)}}
	return m
}

// sdtProcess runs a built test program up to its "ready" line.
type sdtProcess struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	out   *bufio.Reader
}

func startSDT(t *testing.T, prog string) *sdtProcess {
	t.Helper()
	cmd := exec.Command(prog)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	p := &sdtProcess{cmd: cmd, stdin: stdin, out: bufio.NewReader(stdout)}
	if line := p.line(t); line != "ready sem=0" {
		t.Fatalf("program said %q, want %q", line, "ready sem=0")
	}
	return p
}

func (p *sdtProcess) line(t *testing.T) string {
	t.Helper()
	s, err := p.out.ReadString('\n')
	if err != nil {
		t.Fatalf("read from test program: %v", err)
	}
	return strings.TrimSpace(s)
}

// fire lets the program fire its probes and returns the semaphore value it
// saw before doing so.
func (p *sdtProcess) fire(t *testing.T) string {
	t.Helper()
	if _, err := io.WriteString(p.stdin, "go\n"); err != nil {
		t.Fatal(err)
	}
	sem := p.line(t)
	if line := p.line(t); line != "done" {
		t.Fatalf("program said %q, want done", line)
	}
	if err := p.cmd.Wait(); err != nil {
		t.Fatalf("test program: %v", err)
	}
	return sem
}

type record struct {
	SpecID, ArgCnt, ErrMask, Tid uint32
	Args                         [MaxArgs]uint64
}

// TestArgsInBPF attaches the argument recorder to every call site of the
// test program and its library, lets the program fire each probe once, and
// compares every argument BPF read with the value the program passed: at
// -O0 and -O2, with BPF cookies and system-wide uprobes, and with the
// instruction-pointer map and a per-process uprobe.
func TestArgsInBPF(t *testing.T) {
	builds := requireSDT(t)
	requireBPF(t)
	for _, opt := range []string{"O0", "O2"} {
		for _, mode := range []string{"cookie", "ipmap"} {
			t.Run(opt+"/"+mode, func(t *testing.T) {
				testArgsInBPF(t, builds[opt], mode == "ipmap", false, false, false)
			})
			// Through the perf_uprobe PMU, as before 6.6 (the default
			// above is a uprobe_multi link where the kernel has them).
			t.Run(opt+"/"+mode+"/perf", func(t *testing.T) {
				testArgsInBPF(t, builds[opt], mode == "ipmap", false, false, true)
			})
		}
	}
	// Executables without cookies, PIE (gcc's default) and not: a site's
	// distance from the start of the code is the same in every process,
	// so they are traced system-wide through the IP map (the library
	// cannot be, and is left out).
	for _, opt := range []string{"O2", "O2-nopie"} {
		t.Run(opt+"/ipmap/system-wide", func(t *testing.T) {
			testArgsInBPF(t, builds[opt], true, false, true, false)
		})
	}
	// With nop5 optimization, at -O2 only: the -O0 build's nop5 probe is in
	// a leaf function whose red zone the optimized uprobe clobbers (see
	// TracerConfig.OptimizeNop5).
	t.Run("O2/cookie/nop5", func(t *testing.T) {
		if runtime.GOARCH != "amd64" {
			t.Skip("nop5 probes and optimized uprobes are x86-64's")
		}
		if !haveUprobeSyscall() {
			t.Skip("kernel without optimized uprobes (uprobe syscall, 6.18+)")
		}
		testArgsInBPF(t, builds["O2"], false, true, false, false)
	})
}

func testArgsInBPF(t *testing.T, b sdtBuild, noCookies, nop5, systemWide, noMulti bool) {
	tr, err := NewTracer(TracerConfig{NoCookies: noCookies, OptimizeNop5: nop5, NoUprobeMulti: noMulti, testArgs: true})
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	wantMethod := "perf"
	if !noMulti && features.HaveBPFLinkUprobeMulti() == nil {
		wantMethod = "uprobe_multi"
	}
	if got := tr.UprobeMethod(); got != wantMethod {
		t.Fatalf("sites attached through %q, want %q", got, wantMethod)
	}
	if !noCookies && !tr.HaveCookie() {
		t.Skip("kernel without BPF cookies (before 5.15)")
	}
	rd, err := ringbuf.NewReader(tr.Map("usdt_test_events"))
	if err != nil {
		t.Fatal(err)
	}
	defer rd.Close()

	proc := startSDT(t, b.Prog)
	pid := 0
	paths := []string{b.Prog, b.Lib}
	if noCookies && !systemWide {
		pid = proc.cmd.Process.Pid // PIE and shared library: per process
	}
	if noCookies && systemWide {
		paths = paths[:1]
	}
	sites := 0
	for _, path := range paths {
		f, err := Open(path)
		if err != nil {
			t.Fatal(err)
		}
		if systemWide && noCookies && !f.Executable {
			t.Fatalf("%s is %s, not an executable", path, f.Type)
		}
		for _, p := range f.Probes {
			if _, err := tr.attachSite(context.Background(), tr.progs[progTest], f, p, pid, 0, 0, "test"); err != nil {
				t.Fatal(err)
			}
			sites++
		}
	}
	if sem := proc.fire(t); sem == "sem=0" {
		t.Errorf("semaphore still 0 with sw:sem attached")
	}

	bySpec := map[uint32]Site{}
	for _, s := range tr.Sites() {
		bySpec[s.SpecID] = s
		// Where the kernel optimizes uprobes on nop5, the nop5 site is
		// attached one byte in; its RIP-relative argument must still read.
		if s.Probe.Name == "nop5" {
			f, _ := Open(s.Path)
			orig := f.Lookup("sw", "nop5")[0]
			want := orig.Offset
			if tr.optimized {
				want++
			}
			if s.Probe.Offset != want {
				t.Errorf("sw:nop5 attached at %#x, want %#x (optimized uprobes: %v)", s.Probe.Offset, want, tr.optimized)
			}
		}
	}
	got := map[string][][]uint64{}
	hits := map[uint32]int{}
	rd.SetDeadline(time.Now().Add(5 * time.Second))
	for n := 0; n < sites+2; n++ { // sw:nop5 fires three times
		rec, err := rd.Read()
		if errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatalf("%d records for %d sites: %v", n, sites, got["sw:nop5"])
		}
		if err != nil {
			t.Fatal(err)
		}
		var r record
		if err := binary.Read(strings.NewReader(string(rec.RawSample)), binary.LittleEndian, &r); err != nil {
			t.Fatal(err)
		}
		s, ok := bySpec[r.SpecID]
		if !ok {
			t.Fatalf("record for unknown spec %d", r.SpecID)
		}
		hits[r.SpecID]++
		if r.ErrMask != 0 {
			t.Errorf("%s (%q): args not read: mask %#x", s.Probe.FullName(), s.Probe.ArgString, r.ErrMask)
		}
		if int(r.ArgCnt) != len(s.Probe.Args) {
			t.Errorf("%s: %d args in BPF, %d parsed", s.Probe.FullName(), r.ArgCnt, len(s.Probe.Args))
		}
		vals := append([]uint64(nil), r.Args[:r.ArgCnt]...)
		if s.Probe.FullName() == "swlib:fire" {
			if vals[2] == 0 {
				t.Errorf("swlib:fire: pointer argument is 0")
			}
			vals = vals[:2]
		}
		got[s.Probe.FullName()] = append(got[s.Probe.FullName()], vals)
	}
	for id, n := range hits {
		want := 1
		if bySpec[id].Probe.Name == "nop5" {
			want = 3
		}
		if n != want {
			t.Errorf("site %d (%s) fired %d times, want %d", id, bySpec[id].Probe.FullName(), n, want)
		}
	}
	want := expectedArgs()
	if len(paths) == 1 {
		delete(want, "swlib:fire")
	}
	for name, w := range want {
		g := got[name]
		if len(g) != len(w) {
			t.Errorf("%s: %d hits, want %d", name, len(g), len(w))
			continue
		}
		sortTuples(g)
		sortTuples(w)
		for i := range w {
			if fmt.Sprint(g[i]) != fmt.Sprint(w[i]) {
				t.Errorf("%s: read %v, want %v (args %q)", name, hexs(g[i]), hexs(w[i]), argStrings(bySpec, name))
			}
		}
	}
}

func sortTuples(ts [][]uint64) {
	sort.Slice(ts, func(i, j int) bool { return fmt.Sprint(ts[i]) < fmt.Sprint(ts[j]) })
}

func hexs(v []uint64) []string {
	out := make([]string, len(v))
	for i, x := range v {
		out[i] = fmt.Sprintf("%#x", x)
	}
	return out
}

func argStrings(sites map[uint32]Site, name string) []string {
	var out []string
	for _, s := range sites {
		if s.Probe.FullName() == name {
			out = append(out, s.Probe.ArgString)
		}
	}
	return out
}
