//go:build linux && amd64

package funcsbench

import (
	"context"
	"fmt"
	"os"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/link"

	"github.com/spanwatch/spanwatch/bench/internal/loopbench"
	"github.com/spanwatch/spanwatch/internal/funcs"
	"github.com/spanwatch/spanwatch/internal/glob"
)

// trapCalls is the calls per run of BenchmarkTraps: each traced call
// costs tens of microseconds on the machines this was written on.
const trapCalls = 50000

// BenchmarkTraps says where the time of a traced call goes, apart from
// what the BPF programs do: it attaches an empty program (return 0) to
// work() in each of the ways the two tracers use, each on its own copy
// of the loop, and runs the copies in turn with an untraced one, trios
// times. The ways: a uprobe on the entry (both tracers); a uprobe on the
// return instruction (spanwatch's return); a uretprobe (bpftrace's
// return, which also puts a uprobe on the entry); a uprobe and a
// uretprobe together, bpftrace's pair; a uprobe on the entry and one on
// the return instruction, spanwatch's pair.
func BenchmarkTraps(b *testing.B) {
	loop := requireTools(b)
	f, err := funcs.Open(context.Background(), loop, funcs.Options{Filter: mustGlob(b, "work")})
	if err != nil {
		b.Fatal(err)
	}
	if len(f.Funcs) != 1 || len(f.Funcs[0].Returns) != 1 {
		b.Fatalf("work: %+v, want one function with one return site", f.Funcs)
	}
	ret := f.Funcs[0].Returns[0]
	prog, err := ebpf.NewProgram(&ebpf.ProgramSpec{
		Type:         ebpf.Kprobe,
		License:      "GPL",
		Instructions: asm.Instructions{asm.Mov.Imm(asm.R0, 0), asm.Return()},
	})
	if err != nil {
		b.Fatal(err)
	}
	defer prog.Close()
	type way struct {
		name   string
		attach func(ex *link.Executable) ([]link.Link, error)
	}
	entry := func(ex *link.Executable) (link.Link, error) { return ex.Uprobe("work", prog, nil) }
	atRet := func(ex *link.Executable) (link.Link, error) {
		return ex.Uprobe("", prog, &link.UprobeOptions{Address: ret})
	}
	uret := func(ex *link.Executable) (link.Link, error) { return ex.Uretprobe("work", prog, nil) }
	all := func(fs ...func(*link.Executable) (link.Link, error)) func(*link.Executable) ([]link.Link, error) {
		return func(ex *link.Executable) ([]link.Link, error) {
			var ls []link.Link
			for _, f := range fs {
				l, err := f(ex)
				if err != nil {
					return ls, err
				}
				ls = append(ls, l)
			}
			return ls, nil
		}
	}
	ways := []way{
		{"entry uprobe", all(entry)},
		{"return-instruction uprobe", all(atRet)},
		{"uretprobe", all(uret)},
		{"entry uprobe + uretprobe (bpftrace)", all(entry, uret)},
		{"entry uprobe + return-instruction uprobe (spanwatch)", all(entry, atRet)},
	}
	for i := 0; i < b.N; i++ {
		src, err := os.ReadFile(loop)
		if err != nil {
			b.Fatal(err)
		}
		bins := []string{loop + "-bare"}
		for j := range ways {
			bins = append(bins, fmt.Sprintf("%s-way%d", loop, j))
		}
		for _, p := range bins {
			if err := os.WriteFile(p, src, 0o755); err != nil {
				b.Fatal(err)
			}
		}
		var links []link.Link
		for j, w := range ways {
			ex, err := link.OpenExecutable(bins[j+1])
			if err != nil {
				b.Fatal(err)
			}
			ls, err := w.attach(ex)
			links = append(links, ls...)
			if err != nil {
				b.Fatalf("%s: %v", w.name, err)
			}
		}
		times := make([][]float64, len(bins))
		for k := 0; k < trios; k++ {
			for j := range bins {
				p := (j + k) % len(bins)
				times[p] = append(times[p], runN(b, bins[p], trapCalls))
			}
		}
		for _, l := range links {
			l.Close()
		}
		bare := loopbench.Median(times[0])
		for j, w := range ways {
			added := loopbench.Median(times[j+1]) - bare
			b.ReportMetric(added, fmt.Sprintf("way%d-added-ns/call", j))
			b.Logf("%-55s added %6.0f ns per call (median of %d runs of %d calls; bare %.1f ns)", w.name, added, trios, trapCalls, bare)
		}
	}
}

func mustGlob(b *testing.B, p string) *glob.Glob {
	b.Helper()
	g, err := glob.Compile(p)
	if err != nil {
		b.Fatal(err)
	}
	return g
}
