//go:build linux

package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/spanwatch/spanwatch/internal/memory"
)

// cgroupEnv fakes /proc/self for a process in a cgroup v2 container whose
// memory.max is limit.
func cgroupEnv(t *testing.T, limit string) memory.Env {
	t.Helper()
	root := t.TempDir()
	files := map[string]string{
		"proc/self/cgroup":    "0::/\n",
		"proc/self/mountinfo": "30 20 0:26 / " + filepath.Join(root, "cg") + " rw - cgroup2 cgroup2 rw\n",
		"proc/meminfo":        "MemTotal: 65536000 kB\n",
		"cg/memory.max":       limit + "\n",
		"cg/memory.current":   "0\n",
	}
	for p, c := range files {
		if err := os.MkdirAll(filepath.Dir(filepath.Join(root, p)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(root, p), []byte(c), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return memory.Env{ProcSelf: filepath.Join(root, "proc/self"), Meminfo: filepath.Join(root, "proc/meminfo")}
}

// TestMemoryPlan: the budget comes from the container's memory.max, sizes
// the series capacity to what fits under it (less than the default for a
// small container), a setting wins over the budget's default capacity
// when it fits, and one that does not is an error naming the flag.
func TestMemoryPlan(t *testing.T) {
	src := []byte("rules:\n  - {name: R, span: x, when: count > 0}\n")
	small, err := Parse("rules.yaml", src, LoadOptions{MemoryEnv: cgroupEnv(t, "536870912")})
	if err != nil {
		t.Fatal(err)
	}
	p := small.Memory
	if p.Budget.Source != memory.SourceCgroup || p.Budget.Bytes != 536870912/100*memory.CgroupShare {
		t.Errorf("budget %+v", p.Budget)
	}
	if p.MaxSeries < 10000 || p.MaxSeries >= memory.MaxSeries || p.KernelBytes+BinaryBytes+p.GoLimit != p.Budget.Bytes {
		t.Errorf("512MiB container: %d series, kernel %d, Go limit %d", p.MaxSeries, p.KernelBytes, p.GoLimit)
	}
	big, err := Parse("rules.yaml", src, LoadOptions{MemoryEnv: cgroupEnv(t, "max"), Collector: CollectorSettings{MemoryBudget: 4 << 30}, Flags: map[string]string{"memory_budget": "--memory-budget"}})
	if err != nil {
		t.Fatal(err)
	}
	if big.Memory.MaxSeries != memory.MaxSeries || big.Memory.Budget.Source != memory.SourceSetting {
		t.Errorf("4GiB setting: %d series from %s", big.Memory.MaxSeries, big.Memory.Budget.Source)
	}
	fits, err := Parse("rules.yaml", src, LoadOptions{MemoryEnv: cgroupEnv(t, "536870912"), Collector: CollectorSettings{MaxSeries: 2000}, Flags: map[string]string{"max_series": "--max-series"}})
	if err != nil || fits.Memory.MaxSeries != 2000 {
		t.Errorf("--max-series 2000 in 512MiB: %v, %d series", err, fits.Memory.MaxSeries)
	}
	_, err = Parse("rules.yaml", src, LoadOptions{MemoryEnv: cgroupEnv(t, "536870912"), Collector: CollectorSettings{MaxSeries: 262143}, Flags: map[string]string{"max_series": "--max-series"}})
	if err == nil || !strings.Contains(err.Error(), "--max-series: max_series 262143 needs about") || !strings.Contains(err.Error(), "series fit") {
		t.Errorf("--max-series 262143 in 512MiB: %v", err)
	}
}
