//go:build linux

package collector

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"

	"github.com/spanwatch/spanwatch/internal/bpftest"
	"github.com/spanwatch/spanwatch/internal/cctest"
	"github.com/spanwatch/spanwatch/source/marker"
)

// buildC compiles C sources with cc and args into out, skipping where
// libspanwatch has no marker or the compiler is missing.
func buildC(t testing.TB, cc, out string, args ...string) string {
	t.Helper()
	requireCMarker(t)
	return cctest.CC(t, cc, out, args...)
}

// requireCMarker skips where libspanwatch has no marker (it has one on
// x86-64 and arm64).
func requireCMarker(t testing.TB) {
	t.Helper()
	if runtime.GOARCH != "amd64" && runtime.GOARCH != "arm64" {
		t.Skipf("libspanwatch has no marker on %s", runtime.GOARCH)
	}
}

// BenchmarkCMarkerConvention compares two ways for libspanwatch's marker
// to hand the event's address to BPF: in the first argument register
// (%rdi, x0 on arm64), as C passes it, read by uprobe_marker_sysv (the
// way spanwatch.h takes), or stored on the stack so that it sits at sp+8
// like the Go SDK's ABI0 argument, read by the Go marker's program
// uprobe_marker with one more user-memory read. Each
// run of the C program sends b.N spans (at least 20000) through one way;
// the two alternate three times. It reports the per-span time the
// emitting program measured and each program's own run time from the
// kernel's BPF stats.
func BenchmarkCMarkerConvention(b *testing.B) {
	requireBPF(b)
	bin := buildC(b, "gcc", filepath.Join(b.TempDir(), "cmarker"), "-O2", "../source/marker/testdata/cmarker.c")
	stats, err := ebpf.EnableStats(uint32(unix.BPF_STATS_RUN_TIME))
	if err != nil {
		b.Fatalf("enable bpf stats: %v", err)
	}
	defer stats.Close()
	c, err := New(context.Background(), Config{Sources: Sources{Marker: true}, ScanInterval: -1, Inflight: InflightConfig{Off: true}})
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	sem := cctest.SymbolOffset(b, bin, "spanwatch_probe_")
	ex, err := link.OpenExecutable(bin)
	if err != nil {
		b.Fatal(err)
	}
	n := max(b.N, 20000)
	type way struct {
		name string
		prog *ebpf.Program
		sym  string
		span []float64 // ns per span, per run
		bpf  []float64 // program ns per run
	}
	ways := []*way{
		{name: "sysv", prog: c.objs.UprobeMarkerSysV, sym: "spanwatch_marker_"},
		{name: "abi0", prog: c.objs.UprobeMarker, sym: "abi0_marker"},
	}
	b.ResetTimer()
	for round := 0; round < 3; round++ {
		for _, w := range ways {
			l, err := attachAt(ex, c.objs.uprobeMulti, w.prog, cctest.SymbolOffset(b, bin, w.sym), sem)
			if err != nil {
				b.Fatal(err)
			}
			before, _ := w.prog.Stats()
			out, err := exec.Command(bin, w.name, strconv.Itoa(n), "bench."+w.name).Output()
			after, _ := w.prog.Stats()
			l.Close()
			if err != nil {
				b.Fatalf("%s: %v", w.name, err)
			}
			f := strings.Fields(string(out))
			if len(f) < 3 || f[2] != "listening=1" {
				b.Fatalf("%s: %q: the program saw no listener", w.name, out)
			}
			ns, _ := strconv.ParseFloat(f[0], 64)
			w.span = append(w.span, ns)
			if runs := after.RunCount - before.RunCount; runs > 0 {
				w.bpf = append(w.bpf, float64((after.Runtime-before.Runtime).Nanoseconds())/float64(runs))
			}
		}
	}
	b.StopTimer()
	s, err := c.Snapshot()
	if err != nil {
		b.Fatal(err)
	}
	for _, w := range ways {
		var count, errs uint64
		for _, sr := range s.Series {
			if sr.Span == "bench."+w.name {
				count += sr.Count
				errs += sr.Errors
			}
		}
		if count != uint64(3*n) || errs != uint64(3*n/10) {
			b.Errorf("%s: %d spans, %d errors; want %d, %d", w.name, count, errs, 3*n, 3*n/10)
		}
		b.ReportMetric(median(w.span), "ns/span-"+w.name)
		b.ReportMetric(median(w.bpf), "prog-ns/run-"+w.name)
	}
	b.ReportMetric(median(ways[0].span)/median(ways[1].span), "span-ratio-sysv/abi0")
}

// attachAt uprobes prog at a file offset, as the marker source does.
func attachAt(ex *link.Executable, multi bool, prog *ebpf.Program, off, sem uint64) (link.Link, error) {
	if multi {
		return ex.UprobeMulti(nil, prog, &link.UprobeMultiOptions{Addresses: []uint64{off}, RefCtrOffsets: []uint64{sem}})
	}
	return ex.Uprobe("", prog, &link.UprobeOptions{Address: off, RefCtrOffset: sem})
}

func median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := append([]float64(nil), v...)
	for i := range s {
		for j := i + 1; j < len(s); j++ {
			if s[j] < s[i] {
				s[i], s[j] = s[j], s[i]
			}
		}
	}
	return s[len(s)/2]
}

// cSeries sums the series of one span name.
func cSeries(t *testing.T, c *Collector, name string, want uint64) (count, errs, sum uint64) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); ; {
		s, err := c.Snapshot()
		if err != nil {
			t.Fatal(err)
		}
		for _, sr := range s.Series {
			if sr.Span == name {
				count += sr.Count
				errs += sr.Errors
				sum += sr.SumNs
			}
		}
		if count >= want || time.Now().After(deadline) {
			return count, errs, sum
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestCMarkerSpans sends spans through libspanwatch's marker in a program
// built with gcc's default flags: every span counted, with its errors and
// durations, through uprobe_marker_sysv.
func TestCMarkerSpans(t *testing.T) {
	requireBPF(t)
	requireCMarker(t)
	bin := bpftest.CProgram(t, "cmarker")
	c, err := New(context.Background(), Config{Sources: Sources{Marker: true}, ScanInterval: -1, MarkerBinaries: []string{bin}, Inflight: InflightConfig{Off: true}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if got := c.MarkerBinaries(); len(got) != 1 || got[0] != bin {
		t.Fatalf("attached %v, want [%s]", got, bin)
	}
	name := fmt.Sprintf("cmarker.%d", os.Getpid())
	out, err := exec.Command(bin, "sysv", "1000", name).Output()
	if err != nil || !strings.Contains(string(out), "listening=1") {
		t.Fatalf("cmarker: %v, %q: want it to see the listener", err, out)
	}
	count, errs, sum := cSeries(t, c, name, 1000)
	if count != 1000 || errs != 100 || sum != 1000*1_000_000 {
		t.Errorf("%s: %d spans, %d errors, sum %d ns; want 1000, 100, 1 s", name, count, errs, sum)
	}
}

// TestCMarkerScanFindsLibrary: the /proc scan finds a shared libspanwatch
// that a running process maps (not its executable: testdata/cmarkerlib.c,
// linked with libspanwatch.so beside it), attaches to it once,
// and spans from the process are counted; the library's uprobe is let go
// when the process exits.
func TestCMarkerScanFindsLibrary(t *testing.T) {
	requireBPF(t)
	requireCMarker(t)
	app := bpftest.CProgram(t, "cmarker-lib")
	lib := filepath.Join(filepath.Dir(app), "libspanwatch.so")

	c, err := New(context.Background(), Config{Sources: Sources{Marker: true}, ScanInterval: -1, Inflight: InflightConfig{Off: true}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	name := fmt.Sprintf("cmarker.lib.%d", os.Getpid())
	cmd := exec.Command(app, name)
	cmd.Env = append(os.Environ(), "SPANWATCH_EMIT=marker")
	stdin, _ := cmd.StdinPipe()
	stdout, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	r := bufio.NewReader(stdout)
	if line, err := r.ReadString('\n'); err != nil || line != "ready mode=1\n" {
		t.Fatalf("app: %q, %v; want the marker mode", line, err)
	}
	c.ScanMarkers()
	attached := c.MarkerBinaries()
	if !slices.Contains(attached, lib) {
		t.Fatalf("attached %v: the library %s is not among them", attached, lib)
	}
	if slices.Contains(attached, app) {
		t.Errorf("attached the executable %s, which has no marker", app)
	}
	for i := 0; i < 50; i++ {
		kind := "ok\n"
		if i%5 == 0 {
			kind = "err\n"
		}
		io.WriteString(stdin, kind)
		if line, err := r.ReadString('\n'); err != nil || line != "listening=1\n" {
			t.Fatalf("span %d: %q, %v; want the listener seen", i, line, err)
		}
	}
	count, errs, sum := cSeries(t, c, name, 50)
	if count != 50 || errs != 10 || sum != 50*2_000_000 {
		t.Errorf("%s: %d spans, %d errors, sum %d ns; want 50, 10, 100 ms", name, count, errs, sum)
	}
	stdin.Close()
	cmd.Wait()
	for i := 0; i < marker.ReleaseScans; i++ {
		c.ScanMarkers()
	}
	if slices.Contains(c.MarkerBinaries(), lib) {
		t.Errorf("the library is still attached after its only process exited")
	}
}

// TestCMarkerScanHostileLibrary: a process maps, executable, a file named
// like libspanwatch that is not ELF, and one that has the probe's magic
// but no marker where it points: the scan attaches to neither, reports no
// error, and remembers them (they are not read again at every scan).
func TestCMarkerScanHostileLibrary(t *testing.T) {
	requireBPF(t)
	dir := t.TempDir()
	junk := filepath.Join(dir, "libspanwatch-junk.so")
	if err := os.WriteFile(junk, append([]byte("not an ELF file "), make([]byte, 8192)...), 0o644); err != nil {
		t.Fatal(err)
	}
	fake := filepath.Join(dir, "libspanwatch-fake.so")
	src := filepath.Join(dir, "fake.c")
	os.WriteFile(src, []byte(`#include <stdint.h>
struct p { uint64_t w, m[2]; int64_t rel; uint32_t abi, st; } probe = {0, {0x4365626f72707773ull, ~0x4365626f72707773ull}, -24, 1, 0};
uint64_t get(void) { return probe.w; }
`), 0o644)
	buildC(t, "gcc", fake, "-O2", "-shared", "-fPIC", src)
	mapper := filepath.Join(dir, "mapper.c")
	os.WriteFile(mapper, []byte(`#include <fcntl.h>
#include <stdio.h>
#include <sys/mman.h>
#include <unistd.h>
int main(int argc, char **argv) {
	for (int i = 1; i < argc; i++) {
		int fd = open(argv[i], O_RDONLY);
		if (fd < 0 || mmap(0, 4096, PROT_READ | PROT_EXEC, MAP_PRIVATE, fd, 0) == MAP_FAILED) { perror(argv[i]); return 1; }
	}
	printf("mapped\n");
	fflush(stdout);
	char b[1];
	return read(0, b, 1) < 0;
}
`), 0o644)
	bin := buildC(t, "gcc", filepath.Join(dir, "mapper"), "-O2", mapper)
	cmd := exec.Command(bin, junk, fake)
	stdin, _ := cmd.StdinPipe()
	stdout, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { stdin.Close(); cmd.Wait() }()
	if line, _ := bufio.NewReader(stdout).ReadString('\n'); line != "mapped\n" {
		t.Fatalf("mapper: %q", line)
	}
	procDir := filepath.Join("/proc", strconv.Itoa(cmd.Process.Pid))
	libs := marker.MappedLibraries(procDir)
	if len(libs) != 2 {
		t.Fatalf("the scan found %v in the process's maps, want the two files", libs)
	}
	c, err := New(context.Background(), Config{Sources: Sources{Marker: true}, ScanInterval: -1, Inflight: InflightConfig{Off: true}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	before, links := c.marker.Entries(), c.marker.Links()
	for _, l := range libs {
		if err := c.marker.AttachFile(l, procDir); err != nil {
			t.Errorf("attach %s: %v; want a checked file without a marker and no error", l, err)
		}
	}
	if n := c.marker.Entries(); n != before+2 {
		t.Errorf("%d binaries remembered, want %d", n, before+2)
	}
	if n := c.marker.Links(); n != links {
		t.Errorf("%d binaries with the marker's uprobe, want %d: the files have no marker", n, links)
	}
}

// BenchmarkMappedLibspanwatch measures what looking for libspanwatch in
// every process's maps adds to a marker scan: the read of
// /proc/PID/maps for every process on this machine, against the whole
// scan (which also reads /proc and stats each process's executable).
func BenchmarkMappedLibspanwatch(b *testing.B) {
	requireBPF(b)
	c, err := New(context.Background(), Config{Sources: Sources{Marker: true}, ScanInterval: -1, Inflight: InflightConfig{Off: true}})
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	c.ScanMarkers() // every binary checked once: later scans find them known
	ents, _ := os.ReadDir("/proc")
	var dirs []string
	for _, e := range ents {
		if _, err := strconv.Atoi(e.Name()); err == nil {
			dirs = append(dirs, filepath.Join("/proc", e.Name()))
		}
	}
	b.ResetTimer()
	var maps, scan time.Duration
	for i := 0; i < b.N; i++ {
		t0 := time.Now()
		for _, d := range dirs {
			marker.MappedLibraries(d)
		}
		t1 := time.Now()
		c.ScanMarkers()
		maps += t1.Sub(t0)
		scan += time.Since(t1)
	}
	b.ReportMetric(float64(len(dirs)), "processes")
	b.ReportMetric(float64(maps.Microseconds())/float64(b.N), "µs/maps-reads")
	b.ReportMetric(float64(scan.Microseconds())/float64(b.N), "µs/scan")
}
