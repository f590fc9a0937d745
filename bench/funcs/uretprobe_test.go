//go:build linux && amd64

package funcsbench

import (
	"debug/elf"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/spanwatch/spanwatch/bench/internal/loopbench"
	"github.com/spanwatch/spanwatch/source/function"
)

// buildPushFirst builds the loop with work() beginning with a push
// (-DPUSH_FIRST), with requireTools's flags, and checks that it does.
func buildPushFirst(b *testing.B) string {
	b.Helper()
	loop := filepath.Join(b.TempDir(), "loop-push")
	args := []string{"-O2", "-g", "-fstack-protector-strong", "-DPUSH_FIRST", "-o", loop, "testdata/loop.c"}
	if out, err := exec.Command("cc", args...).CombinedOutput(); err != nil {
		b.Fatalf("cc %v: %v: %s", args, err, out)
	}
	if op := firstByte(b, loop, "work"); op < 0x50 || op > 0x57 {
		b.Fatalf("%s: work() begins with opcode %#x, want a push (0x50-0x57)", loop, op)
	}
	return loop
}

// firstByte returns the first byte of function sym in the ELF file path.
func firstByte(b *testing.B, path, sym string) byte {
	b.Helper()
	f, err := elf.Open(path)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	syms, err := f.Symbols()
	if err != nil {
		b.Fatal(err)
	}
	for _, s := range syms {
		if s.Name != sym || int(s.Section) >= len(f.Sections) {
			continue
		}
		sec := f.Sections[s.Section]
		var buf [1]byte
		if _, err := sec.ReadAt(buf[:], int64(s.Value-sec.Addr)); err != nil {
			b.Fatal(err)
		}
		return buf[0]
	}
	b.Fatalf("%s: no symbol %s", path, sym)
	return 0
}

// BenchmarkFuncUretprobeVsBpftrace is BenchmarkFuncVsBpftrace with
// spanwatch's returns: uretprobe, on work() as Debian's flags compile it
// (its first instruction a mov, which the kernel single-steps) and on
// work() beginning with a push (emulated): both tracers then use a
// uprobe and a uretprobe, and the comparison is of what their programs
// and spanwatch's pairing add. Run with -benchtime 1x.
func BenchmarkFuncUretprobeVsBpftrace(b *testing.B) {
	movFirst := requireTools(b)
	pushFirst := buildPushFirst(b)
	defer loopbench.EnableStats(b).Close()
	for i := 0; i < b.N; i++ {
		for _, c := range []struct{ name, loop string }{{"mov-first", movFirst}, {"push-first", pushFirst}} {
			base, swLoop, btLoop := loopbench.Copies(b, c.loop)
			sw := attachSpanwatchReturns(b, swLoop, function.ReturnsUretprobe)
			bt := attachBpftrace(b, btLoop)
			f := compare(b, base, swLoop, btLoop, sw, bt)
			bt.close()
			sw.close()
			swProg, btProg := f.swEntry+f.swRet, f.btEntry+f.btRet
			b.ReportMetric(f.addedRatio, c.name+"-added-ratio")
			b.ReportMetric(f.swAdded, c.name+"-sw-added-ns/call")
			b.ReportMetric(f.btAdded, c.name+"-bt-added-ns/call")
			b.ReportMetric(swProg/btProg, c.name+"-prog-cost-ratio")
			b.Logf("%s: median ns per call over %d trios of %d calls: bare %.1f, spanwatch (returns: uretprobe) %.0f, bpftrace %.0f", c.name, trios, callsPerRun, f.base, f.sw, f.bt)
			b.Logf("%s: BPF program cost (run_time_ns/run_cnt): spanwatch entry %.0f uretprobe %.0f (per call %.0f); bpftrace entry %.0f uretprobe %.0f (per call %.0f); ratio %.2f",
				c.name, f.swEntry, f.swRet, swProg, f.btEntry, f.btRet, btProg, swProg/btProg)
			b.Logf("%s: added per call: spanwatch %.0f ns, bpftrace %.0f ns; median per-trio ratio %.2f (range %.2f-%.2f; goal <= 0.7)", c.name, f.swAdded, f.btAdded, f.addedRatio, f.ratioMin, f.ratioMax)
		}
	}
}
