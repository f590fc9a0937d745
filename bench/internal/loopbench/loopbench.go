//go:build linux

package loopbench

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"
)

// Copies makes three copies of the loop at path, separate files (inodes),
// so that spanwatch and bpftrace each trace their own while a third runs
// bare: path-base, path-spanwatch and path-bpftrace.
func Copies(b testing.TB, path string) (base, sw, bt string) {
	b.Helper()
	src, err := os.ReadFile(path)
	if err != nil {
		b.Fatal(err)
	}
	var out [3]string
	for i, suffix := range []string{"-base", "-spanwatch", "-bpftrace"} {
		out[i] = path + suffix
		if err := os.WriteFile(out[i], src, 0o755); err != nil {
			b.Fatal(err)
		}
	}
	return out[0], out[1], out[2]
}

// Copy makes one more copy of the loop at path, path+suffix, for a
// fourth party (a floor tracer) that must trace a file of its own.
func Copy(b testing.TB, path, suffix string) string {
	b.Helper()
	src, err := os.ReadFile(path)
	if err != nil {
		b.Fatal(err)
	}
	if err := os.WriteFile(path+suffix, src, 0o755); err != nil {
		b.Fatal(err)
	}
	return path + suffix
}

// Run runs the loop with args and returns the number it prints: its
// nanoseconds per iteration, timed in the process.
func Run(b testing.TB, loop string, args ...string) float64 {
	b.Helper()
	out, err := exec.Command(loop, args...).Output()
	if err != nil {
		b.Fatalf("%s: %v", loop, err)
	}
	f, err := strconv.ParseFloat(strings.TrimSpace(string(out)), 64)
	if err != nil {
		b.Fatalf("%s printed %q", loop, out)
	}
	return f
}

// EnableStats turns the kernel's BPF run-time statistics on until the
// returned closer is closed; it skips the benchmark on a kernel without
// them (5.8+).
func EnableStats(b testing.TB) io.Closer {
	b.Helper()
	st, err := ebpf.EnableStats(uint32(unix.BPF_STATS_RUN_TIME))
	if errors.Is(err, ebpf.ErrNotSupported) {
		b.Skipf("no BPF run-time statistics on this kernel (5.8+): %v", err)
	} else if err != nil {
		b.Fatalf("enable BPF statistics: %v", err)
	}
	return st
}

// A ProgCost is a program's runs and run time.
type ProgCost struct {
	Runs uint64
	NS   time.Duration
}

// PerRun is the mean run time in nanoseconds; 0 without runs.
func (c ProgCost) PerRun() float64 {
	if c.Runs == 0 {
		return 0
	}
	return float64(c.NS.Nanoseconds()) / float64(c.Runs)
}

// Sub is c's runs and time since before.
func (c ProgCost) Sub(before ProgCost) ProgCost {
	return ProgCost{c.Runs - before.Runs, c.NS - before.NS}
}

// Stats returns p's runs and run time so far (EnableStats).
func Stats(b testing.TB, p *ebpf.Program) ProgCost {
	b.Helper()
	s, err := p.Stats()
	if err != nil {
		b.Fatalf("program stats: %v", err)
	}
	return ProgCost{s.RunCount, s.Runtime}
}

// ProgIDsOf returns the BPF programs process pid holds open (the prog_id
// of each fd's fdinfo): a tracer's own, not those of another tracer that
// happens to start at the same time.
func ProgIDsOf(pid int) []ebpf.ProgramID {
	dir := fmt.Sprintf("/proc/%d/fdinfo", pid)
	ents, _ := os.ReadDir(dir)
	var ids []ebpf.ProgramID
	for _, e := range ents {
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(line, "prog_id:"); ok {
				if id, err := strconv.ParseUint(strings.TrimSpace(v), 10, 32); err == nil {
					ids = append(ids, ebpf.ProgramID(id))
				}
			}
		}
	}
	return ids
}

// Median returns the median of v (the upper one of an even count),
// leaving v as it is.
func Median(v []float64) float64 {
	v = append([]float64(nil), v...)
	sort.Float64s(v)
	return v[len(v)/2]
}
