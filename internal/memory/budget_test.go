package memory

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// fakeSystem lays out a /proc/self and cgroup tree in a temporary
// directory: files maps paths (relative to the root) to contents; mountinfo
// lines name mount points relative to the root too.
func fakeSystem(t *testing.T, cgroup string, mounts []string, files map[string]string) (Env, string) {
	t.Helper()
	root := t.TempDir()
	var mi []string
	for i, m := range mounts {
		// "ROOT MOUNTPOINT FSTYPE SUPEROPTS"
		f := strings.Fields(m)
		mi = append(mi, strings.Join([]string{"30", "20", "0:" + string(rune('a'+i)), f[0], filepath.Join(root, f[1]), "rw,relatime", "-", f[2], f[2], f[3]}, " "))
	}
	files["proc/self/mountinfo"] = strings.Join(mi, "\n") + "\n"
	files["proc/self/cgroup"] = cgroup
	files["proc/meminfo"] = "MemTotal:       16384000 kB\nMemFree:  1 kB\n"
	for p, c := range files {
		full := filepath.Join(root, p)
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, []byte(c), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return Env{ProcSelf: filepath.Join(root, "proc/self"), Meminfo: filepath.Join(root, "proc/meminfo")}, root
}

func TestDetect(t *testing.T) {
	v2 := []string{"/ sys/fs/cgroup cgroup2 rw,nsdelegate"}
	for _, tc := range []struct {
		name    string
		cgroup  string
		mounts  []string
		files   map[string]string
		setting uint64
		want    uint64
		source  Source
		dir     string // the cgroup found, relative to the root
		version int
		err     string
	}{
		{
			name: "v2 container limit", cgroup: "0::/kubepods/pod1/ctr\n", mounts: v2,
			files: map[string]string{"sys/fs/cgroup/kubepods/pod1/ctr/memory.max": "536870912\n", "sys/fs/cgroup/kubepods/pod1/ctr/memory.current": "1\n",
				"sys/fs/cgroup/kubepods/pod1/memory.max": "max\n"},
			want: 536870912 / 100 * CgroupShare, source: SourceCgroup, dir: "sys/fs/cgroup/kubepods/pod1/ctr", version: 2,
		},
		{
			name: "v2 the parent's limit is lower, memory.high lower still", cgroup: "0::/system.slice/spanwatch.service\n", mounts: v2,
			files: map[string]string{"sys/fs/cgroup/system.slice/spanwatch.service/memory.max": "max\n", "sys/fs/cgroup/system.slice/spanwatch.service/memory.high": "900000000\n",
				"sys/fs/cgroup/system.slice/spanwatch.service/memory.current": "1\n", "sys/fs/cgroup/system.slice/memory.max": "1000000000\n"},
			want: 900000000 / 100 * CgroupShare, source: SourceCgroup, dir: "sys/fs/cgroup/system.slice/spanwatch.service", version: 2,
		},
		{
			name: "v2 cgroup namespace: the mount root is the container", cgroup: "0::/\n", mounts: v2,
			files: map[string]string{"sys/fs/cgroup/memory.max": "268435456\n", "sys/fs/cgroup/memory.current": "1\n"},
			want:  268435456 / 100 * CgroupShare, source: SourceCgroup, dir: "sys/fs/cgroup", version: 2,
		},
		{
			name: "v2 no limit: the default", cgroup: "0::/user.slice\n", mounts: v2,
			files: map[string]string{"sys/fs/cgroup/user.slice/memory.max": "max\n", "sys/fs/cgroup/user.slice/memory.current": "1\n"},
			want:  MaxDefaultBudget, source: SourceDefault, dir: "sys/fs/cgroup/user.slice", version: 2,
		},
		{
			name:   "hybrid: v1 memory controller with a limit, unified without",
			cgroup: "4:memory:/docker/abc\n0::/\n1:cpu,cpuacct:/docker/abc\n",
			mounts: []string{"/ sys/fs/cgroup/unified cgroup2 rw", "/ sys/fs/cgroup/memory cgroup rw,memory"},
			files: map[string]string{"sys/fs/cgroup/memory/docker/abc/memory.stat": "cache 1\nhierarchical_memory_limit 209715200\n",
				"sys/fs/cgroup/unified/cgroup.procs": ""},
			want: 209715200 / 100 * CgroupShare, source: SourceCgroup, dir: "sys/fs/cgroup/memory/docker/abc", version: 1,
		},
		{
			name: "v1 unlimited", cgroup: "4:memory:/\n", mounts: []string{"/ sys/fs/cgroup/memory cgroup rw,memory"},
			files: map[string]string{"sys/fs/cgroup/memory/memory.stat": "hierarchical_memory_limit 9223372036854771712\n"},
			want:  MaxDefaultBudget, source: SourceDefault, dir: "sys/fs/cgroup/memory", version: 1,
		},
		{
			name: "a setting wins", cgroup: "0::/\n", mounts: v2, setting: 300 << 20,
			files: map[string]string{"sys/fs/cgroup/memory.max": "536870912\n", "sys/fs/cgroup/memory.current": "1\n"},
			want:  300 << 20, source: SourceSetting, dir: "sys/fs/cgroup", version: 2,
		},
		{
			name: "a setting above the limit", cgroup: "0::/\n", mounts: v2, setting: 600 << 20,
			files: map[string]string{"sys/fs/cgroup/memory.max": "536870912\n", "sys/fs/cgroup/memory.current": "1\n"},
			err:   "above the cgroup's limit, 512MiB (memory.max of",
		},
		{
			name: "a limit too small", cgroup: "0::/\n", mounts: v2,
			files: map[string]string{"sys/fs/cgroup/memory.max": "33554432\n", "sys/fs/cgroup/memory.current": "1\n"},
			err:   "is below the least the agent runs in",
		},
		{
			name: "no cgroup at all", cgroup: "", mounts: nil, files: map[string]string{},
			want: MaxDefaultBudget, source: SourceDefault,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env, root := fakeSystem(t, tc.cgroup, tc.mounts, tc.files)
			b, err := Detect(env, tc.setting)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("error %v, want one with %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if b.Bytes != tc.want || b.Source != tc.source {
				t.Errorf("budget %d from %s (%s), want %d from %s", b.Bytes, b.Source, b.Detail, tc.want, tc.source)
			}
			wantDir := ""
			if tc.dir != "" {
				wantDir = filepath.Join(root, tc.dir)
			}
			if b.Cgroup.Dir != wantDir || b.Cgroup.Version != tc.version {
				t.Errorf("cgroup %+v, want %s v%d", b.Cgroup, wantDir, tc.version)
			}
		})
	}
}

func TestDefaultBudget(t *testing.T) {
	for _, tc := range []struct{ total, want uint64 }{
		{64 << 30, MaxDefaultBudget},
		{2 << 30, 512 << 20},
		{128 << 20, MinBudget},
	} {
		if b := DefaultBudget(tc.total); b.Bytes != tc.want || b.Source != SourceDefault {
			t.Errorf("DefaultBudget(%s) = %s, want %s", FormatBytes(tc.total), FormatBytes(b.Bytes), FormatBytes(tc.want))
		}
	}
}

func TestFormatBytes(t *testing.T) {
	for n, want := range map[uint64]string{512 << 20: "512MiB", 3 << 29: "1.5GiB", 1000: "1000B", 201070684: "191.8MiB"} {
		if got := FormatBytes(n); got != want {
			t.Errorf("FormatBytes(%d) = %s, want %s", n, got, want)
		}
	}
}
