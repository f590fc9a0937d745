package kernel

import (
	"fmt"
	"strconv"
	"strings"
)

// A Feature is a kernel facility spanwatch's BPF programs use.
type Feature string

// The features spanwatch probes, in the order the report lists them.
const (
	BTF              Feature = "btf"                  // kernel BTF (/sys/kernel/btf/vmlinux): CO-RE, fentry
	RingBuf          Feature = "ringbuf"              // BPF ring buffers: overrun records
	MmapArray        Feature = "mmapable_array"       // BPF_F_MMAPABLE arrays: the series the collector reads in place
	Uprobes          Feature = "uprobes"              // the perf_uprobe PMU: marker and USDT probes
	Atomics          Feature = "atomics"              // BPF atomics with fetch, exchange, compare-and-exchange
	Loop             Feature = "bpf_loop"             // bpf_loop: glob budgets in the kernel
	TaskStorage      Feature = "task_storage"         // task storage and BTF task pointers in uprobe programs
	AttachCookie     Feature = "attach_cookie"        // BPF cookies on uprobes: USDT call sites
	SleepableUprobe  Feature = "sleepable_uprobe"     // sleepable uprobe programs: names on absent pages
	SleepableQueue   Feature = "sleepable_queue"      // queue maps in sleepable programs
	UprobeMulti      Feature = "uprobe_multi"         // uprobe_multi links: uprobes without CAP_SYS_ADMIN
	CopyFromUserStr  Feature = "copy_from_user_str"   // the bpf_copy_from_user_str kfunc
	CopyFromUserTask Feature = "copy_from_user_task"  // bpf_copy_from_user_task: stacks of blocked threads
	FentryPerfTp     Feature = "fentry_perf_tp_event" // fentry on perf_tp_event: the user_events source
	UserEvents       Feature = "user_events"          // CONFIG_USER_EVENTS
)

// Features lists every feature, in report order.
var Features = []Feature{BTF, RingBuf, MmapArray, Uprobes, Atomics, Loop, TaskStorage, AttachCookie,
	SleepableUprobe, SleepableQueue, UprobeMulti, CopyFromUserStr, CopyFromUserTask, FentryPerfTp, UserEvents}

// featureInfo is what is known of a feature: the mainline release that
// brought it (zero when a build option decides) and what it is.
type featureInfo struct {
	since Version
	what  string
}

var info = map[Feature]featureInfo{
	BTF:              {Version{5, 4, 0}, "kernel BTF (CONFIG_DEBUG_INFO_BTF)"},
	RingBuf:          {Version{5, 8, 0}, "BPF ring buffer"},
	MmapArray:        {Version{5, 5, 0}, "mmapable BPF arrays"},
	Uprobes:          {Version{4, 17, 0}, "uprobes through perf_event_open"},
	Atomics:          {Version{5, 12, 0}, "BPF atomics with fetch, xchg and cmpxchg"},
	Loop:             {Version{5, 17, 0}, "bpf_loop"},
	TaskStorage:      {Version{5, 11, 0}, "task storage in uprobe programs"},
	AttachCookie:     {Version{5, 15, 0}, "BPF cookies on uprobes"},
	SleepableUprobe:  {Version{6, 0, 0}, "sleepable uprobe programs"},
	SleepableQueue:   {Version{6, 12, 0}, "queue maps in sleepable programs"},
	UprobeMulti:      {Version{6, 6, 0}, "uprobe_multi links"},
	CopyFromUserStr:  {Version{6, 12, 0}, "the bpf_copy_from_user_str kfunc"},
	CopyFromUserTask: {Version{5, 18, 0}, "bpf_copy_from_user_task"},
	FentryPerfTp:     {Version{}, "fentry on perf_tp_event (BTF and trampolines)"},
	UserEvents:       {Version{}, "user_events (CONFIG_USER_EVENTS, 6.4+)"},
}

// Since returns the mainline release that brought f, and false when a
// build option rather than a release decides whether a kernel has it.
func (f Feature) Since() (Version, bool) {
	v := info[f].since
	return v, v != Version{}
}

// What describes the feature.
func (f Feature) What() string { return info[f].what }

// A Version is a kernel release: major, minor, patch.
type Version [3]int

// ParseVersion reads the leading "X.Y[.Z]" of a release string such as
// "6.1.0-57-cloud-amd64" or "5.10.251".
func ParseVersion(release string) (Version, error) {
	var v Version
	s := release
	if i := strings.IndexFunc(s, func(r rune) bool { return (r < '0' || r > '9') && r != '.' }); i >= 0 {
		s = s[:i]
	}
	parts := strings.Split(strings.TrimSuffix(s, "."), ".")
	if len(parts) < 2 {
		return v, fmt.Errorf("kernel release %q: want X.Y[.Z]", release)
	}
	for i := 0; i < len(parts) && i < 3; i++ {
		n, err := strconv.Atoi(parts[i])
		if err != nil {
			return v, fmt.Errorf("kernel release %q: %w", release, err)
		}
		v[i] = n
	}
	return v, nil
}

// Less reports whether v is an older release than w.
func (v Version) Less(w Version) bool {
	for i := range v {
		if v[i] != w[i] {
			return v[i] < w[i]
		}
	}
	return false
}

func (v Version) String() string {
	if v[2] == 0 {
		return fmt.Sprintf("%d.%d", v[0], v[1])
	}
	return fmt.Sprintf("%d.%d.%d", v[0], v[1], v[2])
}
