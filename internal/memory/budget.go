package memory

import (
	"bufio"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// Source says where a budget came from.
type Source string

const (
	// SourceSetting: collector.memory_budget in the file, or
	// --memory-budget.
	SourceSetting Source = "setting"
	// SourceCgroup: the memory limit of the agent's cgroup (a container's
	// limits.memory, a systemd unit's MemoryMax=).
	SourceCgroup Source = "cgroup"
	// SourceDefault: neither; DefaultBudget of the machine's memory.
	SourceDefault Source = "default"
)

// Bounds of a budget.
const (
	// MinBudget is the smallest budget the agent runs in: its code, the
	// Go runtime, the kernel objects of the smallest series capacity and
	// room for a few thousand series.
	MinBudget = 48 << 20
	// MaxDefaultBudget caps the budget of a host without a cgroup limit.
	MaxDefaultBudget = 1 << 30
	// CgroupShare is the part of a cgroup's limit the budget takes, in
	// percent: the kernel charges the cgroup for more than the agent's
	// own memory (the page cache of --output, socket buffers, page
	// tables), and the cgroup's limit is where the OOM killer acts.
	CgroupShare = 90
)

// A Budget is how much memory the agent may use, in bytes, and where that
// figure came from.
type Budget struct {
	Bytes  uint64
	Source Source
	// Detail says how the figure was found, for the log and /metrics:
	// "memory.max of /sys/fs/cgroup/kubepods/...", "1/4 of 7.7 GiB".
	Detail string
	// Cgroup is the cgroup whose limit set the budget (SourceCgroup),
	// or else the agent's own cgroup when it is found: its memory.events
	// (v2) or memory.failcnt (v1) tell when the kernel had to reclaim.
	Cgroup Cgroup
}

// A Cgroup is a memory cgroup directory and its hierarchy's version.
type Cgroup struct {
	Dir     string
	Version int // 1 or 2; 0 when none was found
	// Limit is its effective memory limit in bytes (0: none).
	Limit uint64
}

// Env is where Detect reads; the zero value means the running system.
type Env struct {
	// ProcSelf is /proc/self (its cgroup and mountinfo files).
	ProcSelf string
	// Meminfo is /proc/meminfo.
	Meminfo string
}

func (e Env) procSelf() string {
	if e.ProcSelf == "" {
		return "/proc/self"
	}
	return e.ProcSelf
}

func (e Env) meminfo() string {
	if e.Meminfo == "" {
		return "/proc/meminfo"
	}
	return e.Meminfo
}

// Detect returns the budget: setting when it is not 0; else CgroupShare
// percent of the agent's cgroup memory limit (cgroup v2 memory.max and
// memory.high, the lowest of its cgroup and every ancestor; cgroup v1
// hierarchical_memory_limit) when there is one; else DefaultBudget of the
// machine's memory. A budget below MinBudget is an error that says so.
func Detect(env Env, setting uint64) (Budget, error) {
	cg, limit, where := findCgroup(env)
	var b Budget
	switch {
	case setting != 0:
		b = Budget{Bytes: setting, Source: SourceSetting, Detail: "the memory_budget setting"}
		if limit != 0 && setting > limit {
			return b, fmt.Errorf("memory budget %s is above the cgroup's limit, %s (%s): the kernel would kill the agent first; lower it or leave it out to take %d%% of the limit",
				FormatBytes(setting), FormatBytes(limit), where, CgroupShare)
		}
	case limit != 0:
		b = Budget{Bytes: limit / 100 * CgroupShare, Source: SourceCgroup, Detail: fmt.Sprintf("%d%% of %s", CgroupShare, where)}
	default:
		total, err := memTotal(env.meminfo())
		if err != nil {
			return b, err
		}
		b = DefaultBudget(total)
	}
	b.Cgroup = cg
	if b.Bytes < MinBudget {
		return b, fmt.Errorf("memory budget %s (%s) is below the least the agent runs in, %s", FormatBytes(b.Bytes), b.Detail, FormatBytes(MinBudget))
	}
	return b, nil
}

// DefaultBudget is the budget of a host whose cgroup sets no limit: a
// quarter of the machine's memory, at most MaxDefaultBudget (1 GiB, what
// the default series capacity needs under the default rules) and at least
// MinBudget. An agent on every node must leave the node to its workloads.
func DefaultBudget(memTotal uint64) Budget {
	b := min(memTotal/4, MaxDefaultBudget)
	detail := fmt.Sprintf("1/4 of the machine's %s", FormatBytes(memTotal))
	if b == MaxDefaultBudget {
		detail = fmt.Sprintf("%s, the default cap (the machine has %s; no cgroup memory limit)", FormatBytes(b), FormatBytes(memTotal))
	}
	return Budget{Bytes: max(b, MinBudget), Source: SourceDefault, Detail: detail}
}

// findCgroup finds the agent's memory cgroup and its effective limit
// (0: none), preferring cgroup v2.
func findCgroup(env Env) (cg Cgroup, limit uint64, where string) {
	mounts, err := readMounts(filepath.Join(env.procSelf(), "mountinfo"))
	if err != nil {
		return Cgroup{}, 0, ""
	}
	paths, err := readCgroupPaths(filepath.Join(env.procSelf(), "cgroup"))
	if err != nil {
		return Cgroup{}, 0, ""
	}
	if p, ok := paths["2"]; ok {
		for _, m := range mounts {
			if m.fstype != "cgroup2" {
				continue
			}
			dir, ok := m.dirOf(p)
			if !ok {
				continue
			}
			if _, err := os.Stat(filepath.Join(dir, "memory.max")); err != nil && m.mountPoint != dir {
				// No memory controller here (a hybrid host's unified
				// hierarchy): try v1.
				continue
			}
			limit, where = v2Limit(dir, m.mountPoint)
			if _, err := os.Stat(filepath.Join(dir, "memory.current")); err == nil || limit != 0 {
				return Cgroup{Dir: dir, Version: 2, Limit: limit}, limit, where
			}
		}
	}
	if p, ok := paths["memory"]; ok {
		for _, m := range mounts {
			if m.fstype != "cgroup" || !m.hasOption("memory") {
				continue
			}
			dir, ok := m.dirOf(p)
			if !ok {
				dir = m.mountPoint
			}
			if _, err := os.Stat(filepath.Join(dir, "memory.stat")); err != nil {
				continue
			}
			if v, err := statValue(filepath.Join(dir, "memory.stat"), "hierarchical_memory_limit"); err == nil && v < unlimitedV1 {
				limit, where = v, "hierarchical_memory_limit of "+dir
			}
			return Cgroup{Dir: dir, Version: 1, Limit: limit}, limit, where
		}
	}
	return Cgroup{}, 0, ""
}

// unlimitedV1 is past any real limit: cgroup v1 reports "no limit" as
// PAGE_COUNTER_MAX pages (0x7FFFFFFFFFFFF000 with 4 KiB pages).
const unlimitedV1 = 1 << 62

// v2Limit is the lowest memory.max or memory.high of dir and its
// ancestors up to the mount point.
func v2Limit(dir, top string) (limit uint64, where string) {
	for d := dir; ; d = filepath.Dir(d) {
		for _, f := range []string{"memory.max", "memory.high"} {
			v, err := readLimit(filepath.Join(d, f))
			if err == nil && v != 0 && (limit == 0 || v < limit) {
				limit, where = v, f+" of "+d
			}
		}
		if d == top || d == "/" || d == "." || !strings.HasPrefix(d, top) {
			return limit, where
		}
	}
}

// readLimit reads a cgroup v2 limit file: a number of bytes, or "max" (0).
func readLimit(path string) (uint64, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	s := strings.TrimSpace(string(b))
	if s == "max" {
		return 0, nil
	}
	return strconv.ParseUint(s, 10, 64)
}

type mount struct {
	root, mountPoint, fstype string
	options                  []string
}

func (m mount) hasOption(o string) bool {
	for _, x := range m.options {
		if x == o {
			return true
		}
	}
	return false
}

// dirOf maps a cgroup path (from /proc/self/cgroup) to its directory
// under the mount; false when the mount does not show it.
func (m mount) dirOf(p string) (string, bool) {
	rel, ok := strings.CutPrefix(p, m.root)
	if !ok {
		return "", false
	}
	if m.root != "/" && rel != "" && !strings.HasPrefix(rel, "/") {
		return "", false
	}
	return filepath.Join(m.mountPoint, rel), true
}

// readMounts reads the cgroup mounts of a mountinfo file.
func readMounts(path string) ([]mount, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []mount
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 4096), 1<<20)
	for sc.Scan() {
		// ID PARENT MAJ:MIN ROOT MOUNTPOINT OPTIONS [OPTIONAL...] - FSTYPE SOURCE SUPEROPTIONS
		pre, post, ok := strings.Cut(sc.Text(), " - ")
		if !ok {
			continue
		}
		a, b := strings.Fields(pre), strings.Fields(post)
		if len(a) < 5 || len(b) < 1 || (b[0] != "cgroup" && b[0] != "cgroup2") {
			continue
		}
		m := mount{root: unescape(a[3]), mountPoint: unescape(a[4]), fstype: b[0]}
		if len(b) >= 3 {
			m.options = strings.Split(b[2], ",")
		}
		out = append(out, m)
	}
	return out, sc.Err()
}

// unescape undoes mountinfo's octal escapes (\040 for a space).
func unescape(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// readCgroupPaths reads /proc/self/cgroup: the v2 path under "2", each v1
// controller's path under its name.
func readCgroupPaths(path string) (map[string]string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	out := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		parts := strings.SplitN(line, ":", 3)
		if len(parts) != 3 {
			continue
		}
		if parts[0] == "0" && parts[1] == "" {
			out["2"] = parts[2]
			continue
		}
		for _, c := range strings.Split(parts[1], ",") {
			out[c] = parts[2]
		}
	}
	return out, nil
}

// statValue reads one key of a "key value" file (memory.stat,
// memory.events).
func statValue(path, key string) (uint64, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		k, v, ok := strings.Cut(line, " ")
		if ok && k == key {
			return strconv.ParseUint(strings.TrimSpace(v), 10, 64)
		}
	}
	return 0, fmt.Errorf("%s: no %s: %w", path, key, fs.ErrNotExist)
}

// memTotal reads MemTotal from /proc/meminfo.
func memTotal(path string) (uint64, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, fmt.Errorf("memory budget: %w", err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "MemTotal:"); ok {
			f := strings.Fields(v)
			if len(f) == 2 && f[1] == "kB" {
				n, err := strconv.ParseUint(f[0], 10, 64)
				if err == nil {
					return n << 10, nil
				}
			}
		}
	}
	return 0, errors.New("memory budget: no MemTotal in " + path)
}

// FormatBytes renders a size the way the settings take it: 512MiB,
// 1.5GiB, 191.8MiB.
func FormatBytes(n uint64) string {
	for _, u := range []struct {
		size uint64
		name string
	}{{1 << 30, "GiB"}, {1 << 20, "MiB"}, {1 << 10, "KiB"}} {
		if n >= u.size {
			return strconv.FormatFloat(float64(n)/float64(u.size), 'g', 4, 64) + u.name
		}
	}
	return strconv.FormatUint(n, 10) + "B"
}
