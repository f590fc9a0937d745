package memory

import (
	"cmp"
	"os"
	"path/filepath"
	"runtime"
	"runtime/metrics"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/cilium/ebpf"

	krel "github.com/spanwatch/spanwatch/internal/kernel"
)

// A Meter measures the agent's memory (Usage). It is safe for concurrent
// use.
type Meter struct {
	cg     Cgroup
	maps   func() uint64
	binary uint64

	mu      sync.Mutex
	samples []metrics.Sample
}

// Go memory classes, from runtime/metrics: what Go has mapped (total),
// less what it returned to the kernel or holds free, less the heap's
// objects, plus the heap's live objects as of the last collection.
const (
	goTotal    = "/memory/classes/total:bytes"
	goReleased = "/memory/classes/heap/released:bytes"
	goFree     = "/memory/classes/heap/free:bytes"
	goObjects  = "/memory/classes/heap/objects:bytes"
	goLive     = "/gc/heap/live:bytes"
)

// NewMeter returns a meter of the agent's memory: maps reports the BPF
// maps' memory (nil: none yet), cg the cgroup to watch (zero: none). The
// binary's resident size is read now, before any BPF map is mmapped into
// the process (those pages count as file pages too).
func NewMeter(cg Cgroup, maps func() uint64) *Meter {
	m := &Meter{cg: cg, maps: maps}
	for _, n := range []string{goTotal, goReleased, goFree, goObjects, goLive} {
		m.samples = append(m.samples, metrics.Sample{Name: n})
	}
	m.binary = statusBytes("/proc/self/status", "RssFile:")
	return m
}

// SetMaps sets what reports the BPF maps' memory.
func (m *Meter) SetMaps(maps func() uint64) {
	m.mu.Lock()
	m.maps = maps
	m.mu.Unlock()
}

// Read measures now.
func (m *Meter) Read() Usage {
	m.mu.Lock()
	metrics.Read(m.samples)
	var v [5]uint64
	for i, s := range m.samples {
		if s.Value.Kind() == metrics.KindUint64 {
			v[i] = s.Value.Uint64()
		}
	}
	maps := m.maps
	m.mu.Unlock()
	u := Usage{Binary: m.binary}
	if inUse := v[0] - v[1] - v[2]; inUse >= v[3] {
		u.Go = inUse - v[3] + v[4]
	} else {
		u.Go = inUse
	}
	if maps != nil {
		u.BPFMaps = maps()
	}
	u.Cgroup, u.Events = m.cgroupUsage()
	u.CgroupLimit = m.cg.Limit
	return u
}

// GoLimitFor is the Go soft limit (debug.SetMemoryLimit) that leaves room
// in the budget for the BPF maps and the binary.
func GoLimitFor(budget, bpfMaps, binary uint64) uint64 {
	rest := budget - min(budget, bpfMaps+binary)
	return rest
}

// Binary returns the binary's resident size as read by NewMeter.
func (m *Meter) Binary() uint64 { return m.binary }

// cgroupUsage reads the cgroup's memory in use less its inactive file
// pages, and its pressure events so far.
func (m *Meter) cgroupUsage() (inUse, events uint64) {
	switch m.cg.Version {
	case 2:
		cur := fileUint(filepath.Join(m.cg.Dir, "memory.current"))
		inactive, _ := statValue(filepath.Join(m.cg.Dir, "memory.stat"), "inactive_file")
		for _, k := range []string{"high", "max", "oom"} {
			n, _ := statValue(filepath.Join(m.cg.Dir, "memory.events"), k)
			events += n
		}
		return cur - min(cur, inactive), events
	case 1:
		cur := fileUint(filepath.Join(m.cg.Dir, "memory.usage_in_bytes"))
		inactive, _ := statValue(filepath.Join(m.cg.Dir, "memory.stat"), "total_inactive_file")
		return cur - min(cur, inactive), fileUint(filepath.Join(m.cg.Dir, "memory.failcnt"))
	}
	return 0, 0
}

func fileUint(path string) uint64 {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0
	}
	n, _ := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64)
	return n
}

// statusBytes reads a "Key: N kB" line of /proc/self/status.
func statusBytes(path, key string) uint64 {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, key); ok {
			f := strings.Fields(v)
			if len(f) >= 1 {
				n, _ := strconv.ParseUint(f[0], 10, 64)
				return n << 10
			}
		}
	}
	return 0
}

// ProcessMapBytes is the memory the kernel charges for the BPF maps this
// process holds open (the maps of every object, the collector's and the
// sources'), from /proc/self/fdinfo: each map's memlock where it is what
// the kernel charges (Linux 6.4+: map_mem_usage per map type, the
// elements inserted so far for a hash created with BPF_F_NO_PREALLOC;
// before 5.11: the pages charged at creation), else (5.11 to 6.3) the
// map's size as MapShape.Bytes computes it from the shape fdinfo prints:
// memlock there is the map's keys' and values' sizes times its entries
// (bpf_map_memory_footprint: no buckets, element headers or ring buffer,
// a key counted for each array element), and for a hash that allocates
// as it fills no figure says how full it is, so it is counted full, as
// the plan counted it. A release it cannot read: the larger of the two.
// It caches the figure for MapBytesTTL: maps are created at start and as
// sources attach, and grow with the series, slowly.
type ProcessMapBytes struct {
	mu   sync.Mutex
	at   time.Time
	n    uint64
	proc string
	// release is the kernel's release ("" reads it from the proc
	// directory's sys/kernel/osrelease).
	release string
}

// MapBytesTTL is how long ProcessMapBytes keeps its figure.
const MapBytesTTL = 30 * time.Second

// MapFootprintSince and MapMemUsageSince bound the releases whose
// fdinfo memlock is a map's keys' and values' sizes times its entries
// (bpf_map_memory_footprint), not what it is charged: from 5.11 (before
// it, the pages charged to RLIMIT_MEMLOCK at creation) to before 6.4
// (map_mem_usage per map type).
var (
	MapFootprintSince = krel.Version{5, 11, 0}
	MapMemUsageSince  = krel.Version{6, 4, 0}
)

// memlockKind is what a kernel's fdinfo memlock is.
type memlockKind int

const (
	memlockUnknown   memlockKind = iota // a release not understood: the larger of memlock and the estimate
	memlockCharged                      // what the map is charged (before 5.11, and 6.4+)
	memlockFootprint                    // keys' and values' sizes (5.11 to 6.3): the estimate
)

func memlockOf(release string) memlockKind {
	v, err := krel.ParseVersion(release)
	switch {
	case err != nil:
		return memlockUnknown
	case !v.Less(MapFootprintSince) && v.Less(MapMemUsageSince):
		return memlockFootprint
	}
	return memlockCharged
}

// Read returns the figure, read again when older than MapBytesTTL.
func (p *ProcessMapBytes) Read() uint64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	if now := time.Now(); p.at.IsZero() || now.Sub(p.at) >= MapBytesTTL {
		proc := cmp.Or(p.proc, "/proc/self")
		if p.release == "" {
			if b, err := os.ReadFile(filepath.Join(filepath.Dir(proc), "sys/kernel/osrelease")); err == nil {
				p.release = strings.TrimSpace(string(b))
			}
		}
		p.n, p.at = mapMemlock(proc, memlockOf(p.release), possibleCPUs()), now
	}
	return p.n
}

// mapMemlock sums the maps of the process whose proc directory is proc
// (mapInfoBytes).
func mapMemlock(proc string, kind memlockKind, cpus int) uint64 {
	dir := filepath.Join(proc, "fdinfo")
	ents, err := os.ReadDir(dir)
	if err != nil {
		return 0
	}
	var total uint64
	for _, e := range ents {
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil || !strings.Contains(string(b), "\nmap_id:") {
			continue
		}
		total += mapInfoBytes(string(b), kind, cpus)
	}
	return total
}

// MapInfoBytes is what the kernel charges for the BPF map whose
// /proc/PID/fdinfo text is info, counted as ProcessMapBytes counts it on
// this machine's kernel.
func MapInfoBytes(info string) uint64 {
	h := host()
	return mapInfoBytes(info, h.kind, h.cpus)
}

// mapInfoBytes is a map's memlock, its shape's most, or the larger of
// the two, as kind says.
func mapInfoBytes(info string, kind memlockKind, cpus int) uint64 {
	memlock, shape := parseMapInfo(info)
	most, _ := shape.Bytes(cpus)
	switch kind {
	case memlockCharged:
		return memlock
	case memlockFootprint:
		return most
	}
	return max(memlock, most)
}

type hostKernel struct {
	kind memlockKind
	cpus int
}

// host is what mapInfoBytes needs of this machine: what its kernel's
// fdinfo memlock is (its release, /proc/sys/kernel/osrelease) and its
// possible CPUs.
var host = sync.OnceValue(func() hostKernel {
	b, _ := os.ReadFile("/proc/sys/kernel/osrelease")
	return hostKernel{kind: memlockOf(strings.TrimSpace(string(b))), cpus: possibleCPUs()}
})

func possibleCPUs() int {
	cpus, err := ebpf.PossibleCPU()
	if err != nil {
		return runtime.NumCPU()
	}
	return cpus
}

// parseMapInfo reads a map's memlock and shape from its fdinfo.
func parseMapInfo(info string) (memlock uint64, s MapShape) {
	for _, line := range strings.Split(info, "\n") {
		k, v, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		v = strings.TrimSpace(v)
		if k == "memlock" {
			memlock, _ = strconv.ParseUint(v, 10, 64)
			continue
		}
		var field *uint32
		switch k {
		case "map_type":
			field = &s.Type
		case "key_size":
			field = &s.KeySize
		case "value_size":
			field = &s.ValueSize
		case "max_entries":
			field = &s.MaxEntries
		case "map_flags":
			field = &s.Flags
		default:
			continue
		}
		n, _ := strconv.ParseUint(v, 0, 32) // map_flags is hexadecimal (0x400)
		*field = uint32(n)
	}
	return memlock, s
}
