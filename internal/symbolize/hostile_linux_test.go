package symbolize

import (
	"bufio"
	"debug/elf"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/spanwatch/spanwatch/internal/elfbuild"
	"github.com/spanwatch/spanwatch/internal/userfile"
	"github.com/spanwatch/spanwatch/snapshot"
)

// The tests in this file play a hostile local user against the symbolizer,
// as the agent runs it: as root, reading the files of processes that
// belong to nobody. The user's process runs as nobody with a /tmp of its
// own (a tmpfs in a mount namespace of its own, or in user, mount and PID
// namespaces where nobody is root), and what the user plants there is
// planted as nobody. A root-only secret waits outside every temporary
// directory the user can reach. Each test says what the symbolizer must
// do instead of what it did before (see BENCHMARKS.md for the figures
// before and after).

// secretLine is what the root-only file holds: a perf map line covering
// every address, so that read as a perf map it names any frame.
const secretLine = "0 ffffffffffffffff TOPSECRET\n"

// A hostileLab is a binary nobody can run and a secret nobody can read.
type hostileLab struct {
	bin    string // cprog, built -g
	dir    string // where it is, traversable by nobody
	secret string // root-only, 0600
}

func newHostileLab(t *testing.T) *hostileLab {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("skipping: a hostile user is played against the agent as root, and needs root to become nobody")
	}
	for _, tool := range []string{"setpriv", "unshare", "mount"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("skipping: %s not found: %v", tool, err)
		}
	}
	// Outside /tmp, which the user's process has its own of: it sees the
	// binary and the secret at the same paths as the agent, as it sees
	// /usr/bin and /root/secret.txt.
	dir, err := os.MkdirTemp("/var/tmp", "spanwatch-hostile-")
	if err != nil {
		t.Skipf("skipping: no temporary directory outside /tmp: %v", err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "cprog")
	buildC(t, bin, filepath.Join("testdata", "cprog.c"))
	secret := filepath.Join(dir, "secret", "secret.txt")
	if err := os.Mkdir(filepath.Dir(secret), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(secret, []byte(secretLine), 0o600); err != nil {
		t.Fatal(err)
	}
	return &hostileLab{bin: bin, dir: dir, secret: secret}
}

// A victim is how the user's process is started.
type victim struct {
	bin string
	// userns runs it in user, mount and PID namespaces of its own, nobody
	// mapped to root inside (it is PID 1 there). Otherwise it gets a
	// mount namespace of its own and runs as nobody.
	userns bool
	// asRoot runs it as root (not in a user namespace), for a perf map
	// that nobody plants for root's process.
	asRoot bool
	// rootSetup runs as root in its mount namespace before it starts
	// (not with userns); setup runs as the process's user, with $$ its
	// PID as it sees it.
	rootSetup, setup string
	extra            []*os.File
}

// start starts v with a /tmp of its own and returns its host PID once it
// runs bin; closing stdin ends it.
func (v victim) start(t *testing.T) (pid int, stdin io.WriteCloser) {
	t.Helper()
	setup := v.setup
	if setup == "" {
		setup = "true"
	}
	var cmd *exec.Cmd
	if v.userns {
		script := fmt.Sprintf("mount -t tmpfs none /tmp && (%s) && exec %s", setup, v.bin)
		cmd = exec.Command("setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups",
			"unshare", "--user", "--map-root-user", "--mount", "--pid", "--fork", "--kill-child", "/bin/sh", "-c", script)
	} else {
		rootSetup := v.rootSetup
		if rootSetup == "" {
			rootSetup = "true"
		}
		as := "setpriv --reuid=nobody --regid=nogroup --clear-groups"
		if v.asRoot {
			as = ""
		}
		inner := fmt.Sprintf("%s /bin/sh -c '(%s) && exec %s'", as, strings.ReplaceAll(setup, "'", `'\''`), v.bin)
		script := fmt.Sprintf("mount -t tmpfs -o mode=1777 none /tmp && (%s) && exec %s", rootSetup, inner)
		cmd = exec.Command("unshare", "--mount", "--propagation", "private", "/bin/sh", "-c", script)
	}
	cmd.ExtraFiles = v.extra
	stdin, _ = cmd.StdinPipe()
	stdout, _ := cmd.StdoutPipe()
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { stdin.Close(); cmd.Process.Kill(); cmd.Wait() })
	if line, err := bufio.NewReader(stdout).ReadString('\n'); err != nil || line != "ready\n" {
		t.Fatalf("the victim did not start: %q, %v", line, err)
	}
	pid = cmd.Process.Pid
	if v.userns {
		pid = childOf(t, pid)
	}
	return pid, stdin
}

// unmapped are stack addresses in no mapping: only a perf map names them.
var unmapped = []uint64{0x10000010, 0x10000020}

// leaked reports the frames that carry the secret.
func leaked(frames []snapshot.Frame) []string {
	var out []string
	for _, f := range frames {
		if strings.Contains(f.Function, "TOPSECRET") {
			out = append(out, f.String())
		}
	}
	return out
}

func counted(t *testing.T, reason string, before map[string]uint64) {
	t.Helper()
	if userfile.Counts()[reason] <= before[reason] {
		t.Errorf("no %s refusal counted: %v", reason, userfile.Counts())
	}
}

// TestHostilePerfMapLinks: the user links their process's perf map to a
// root-only file, absolutely or climbing by "..", from the host's mount
// namespace or from user and mount namespaces of their own. Before, the
// secret's line named frames. Now no link is followed for a perf map.
func TestHostilePerfMapLinks(t *testing.T) {
	lab := newHostileLab(t)
	dotdot := strings.Repeat("../", 8) + strings.TrimPrefix(lab.secret, "/")
	for _, tc := range []struct {
		name   string
		userns bool
		target string
	}{
		{"absolute", false, lab.secret},
		{"dotdot", false, dotdot},
		{"userns absolute", true, lab.secret},
		{"userns dotdot", true, dotdot},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := userfile.Counts()
			pid, _ := victim{bin: lab.bin, userns: tc.userns, setup: fmt.Sprintf("ln -s %s /tmp/perf-$$.map", tc.target)}.start(t)
			s := New(Config{})
			defer s.Close()
			if err := s.Capture(uint32(pid)); err != nil {
				t.Fatal(err)
			}
			frames, err := s.User(uint32(pid), unmapped)
			if err != nil {
				t.Fatal(err)
			}
			if l := leaked(frames); l != nil {
				t.Fatalf("the root-only file named frames: %v", l)
			}
			counted(t, userfile.ReasonSymlink, before)
		})
	}
	// The same process with a perf map of its own names its frames: the
	// refusals above are the links', not a perf map path that is never
	// read.
	t.Run("own map", func(t *testing.T) {
		pid, _ := victim{bin: lab.bin, userns: true, setup: "echo '10000000 100 jit_own' > /tmp/perf-$$.map"}.start(t)
		s := New(Config{})
		defer s.Close()
		frames, err := s.User(uint32(pid), unmapped)
		if err != nil || frames[0].Function != "jit_own" {
			t.Fatalf("frames %+v, %v; want jit_own", frames, err)
		}
	})
}

// TestHostilePerfMapOwner: a perf map planted by nobody for root's process
// renamed root's frames, and a root-only file at a process's perf map path
// was read for a process that could not read it. perf(1)'s rule now: the
// map belongs to the process's user or root, and the process can read it.
func TestHostilePerfMapOwner(t *testing.T) {
	lab := newHostileLab(t)
	t.Run("nobody's map for root's process", func(t *testing.T) {
		before := userfile.Counts()
		// Root's process, nobody planting: /tmp is world-writable.
		plant := "setpriv --reuid=nobody --regid=nogroup --clear-groups sh -c \"echo '10000000 100 planted_by_nobody' > /tmp/perf-$$.map\""
		pid, _ := victim{bin: lab.bin, asRoot: true, rootSetup: plant}.start(t)
		s := New(Config{})
		defer s.Close()
		frames, err := s.User(uint32(pid), unmapped)
		if err != nil {
			t.Fatal(err)
		}
		if frames[0].Function != "" {
			t.Fatalf("nobody's perf map named root's frame: %+v", frames[0])
		}
		counted(t, userfile.ReasonOwner, before)
	})
	t.Run("root-only map for nobody's process", func(t *testing.T) {
		before := userfile.Counts()
		plant := fmt.Sprintf("cp %s /tmp/perf-$$.map && chmod 600 /tmp/perf-$$.map", lab.secret)
		pid, _ := victim{bin: lab.bin, rootSetup: plant}.start(t)
		s := New(Config{})
		defer s.Close()
		frames, err := s.User(uint32(pid), unmapped)
		if err != nil {
			t.Fatal(err)
		}
		if l := leaked(frames); l != nil {
			t.Fatalf("a file the process could not read named its frames: %v", l)
		}
		counted(t, userfile.ReasonAccess, before)
	})
}

// TestHostileFIFO: a FIFO as the perf map, or as the build-id debug file
// inside the process's root. Before, open blocked forever with the
// symbolizer's lock held: no overrun from any process after that, and no
// shutdown. Now FIFOs are refused without opening them.
func TestHostileFIFO(t *testing.T) {
	lab := newHostileLab(t)
	stripped := filepath.Join(lab.dir, "cprog-stripped")
	run(t, "strip", "--strip-all", "-o", stripped, lab.bin)
	ef, err := elf.Open(stripped)
	if err != nil {
		t.Fatal(err)
	}
	id := readBuildID(ef)
	ef.Close()
	if len(id) < 4 {
		t.Skip("skipping: the C compiler wrote no build id")
	}
	debugFifo := fmt.Sprintf("mount -t tmpfs none /usr/lib/debug && mkdir -p /usr/lib/debug/.build-id/%s && mkfifo /usr/lib/debug/.build-id/%s/%s.debug", id[:2], id[:2], id[2:])
	for _, tc := range []struct {
		name string
		v    victim
		want string // the first frame's function
	}{
		{"perf map", victim{bin: lab.bin, setup: "mkfifo /tmp/perf-$$.map"}, "slow"},
		{"userns perf map", victim{bin: lab.bin, userns: true, setup: "mkfifo /tmp/perf-$$.map"}, "slow"},
		{"userns build-id debug file", victim{bin: stripped, userns: true, setup: debugFifo}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := userfile.Counts()
			pid, _ := tc.v.start(t)
			addrs := runtimeAddrsIn(t, pid, lab.bin, tc.v.bin, 1, "slow", "c")
			s := New(Config{Timeout: 5 * time.Second})
			start := time.Now()
			frames, err := s.User(uint32(pid), append(addrs, unmapped...))
			if err != nil {
				t.Fatal(err)
			}
			if d := time.Since(start); d > 2*time.Second {
				t.Errorf("symbolizing took %v", d)
			}
			if frames[0].Function != tc.want {
				t.Errorf("frame 0 = %+v, want %q", frames[0], tc.want)
			}
			// Another process, symbolized right after, is not held up.
			self := deepStack(2)
			start = time.Now()
			if f, err := s.User(uint32(os.Getpid()), self[:1]); err != nil || f[0].Function == "" {
				t.Errorf("the agent's own stack: %+v, %v", f, err)
			}
			if d := time.Since(start); d > 2*time.Second {
				t.Errorf("the next process took %v", d)
			}
			start = time.Now()
			s.Close()
			if d := time.Since(start); d > time.Second {
				t.Errorf("Close took %v", d)
			}
			counted(t, userfile.ReasonNotRegular, before)
		})
	}
}

// TestHostileFUSE: the process's /tmp is a FUSE file system whose daemon
// never answers (nobody reads its /dev/fuse): looking its perf map up
// blocks in the kernel, uninterruptibly. The symbolizer gives up after its
// Timeout, names the frames it can, is not held up for the next process,
// and closes at once.
func TestHostileFUSE(t *testing.T) {
	lab := newHostileLab(t)
	fuse, err := os.OpenFile("/dev/fuse", os.O_RDWR, 0)
	if err != nil {
		t.Skipf("skipping: no /dev/fuse: %v", err)
	}
	// Closing it aborts the connection: the stuck lookups return.
	t.Cleanup(func() { fuse.Close() })
	mount := "mount -i -t fuse.spanwatch-test -o fd=3,rootmode=40000,user_id=0,group_id=0,allow_other spanwatch-test /tmp"
	pid, _ := victim{bin: lab.bin, rootSetup: mount, extra: []*os.File{fuse}}.start(t)
	addrs := runtimeAddrs(t, pid, lab.bin, 1, "slow", "c")
	s := New(Config{Timeout: 500 * time.Millisecond})
	before := userfile.Counts()
	start := time.Now()
	frames, err := s.User(uint32(pid), addrs)
	if err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Errorf("symbolizing took %v with a 500ms timeout", d)
	}
	if frames[0].Function != "slow" || frames[1].Function != "c" {
		t.Errorf("frames %+v, want slow and c from the binary", frames[:2])
	}
	counted(t, userfile.ReasonTimeout, before)
	// Root's own process is not held up by nobody's stuck lookup.
	start = time.Now()
	if f, err := s.User(uint32(os.Getpid()), deepStack(2)[:1]); err != nil || f[0].Function == "" {
		t.Errorf("the agent's own stack: %+v, %v", f, err)
	}
	if d := time.Since(start); d > time.Second {
		t.Errorf("the next process took %v", d)
	}
	// The same user's next process fails at once while the lookup hangs.
	pid2, _ := victim{bin: lab.bin, rootSetup: mount, extra: []*os.File{fuse}}.start(t)
	start = time.Now()
	s.Capture(uint32(pid2))
	if d := time.Since(start); d > time.Second {
		t.Errorf("nobody's second process took %v while the first lookup hangs", d)
	}
	start = time.Now()
	s.Close()
	if d := time.Since(start); d > time.Second {
		t.Errorf("Close took %v", d)
	}
}

// heapAfter runs fn and returns the heap it allocated in all and the heap
// in use after it, both after a collection.
func heapAfter(fn func()) (total, inuse uint64) {
	var a, b runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&a)
	fn()
	runtime.GC()
	runtime.ReadMemStats(&b)
	return b.TotalAlloc - a.TotalAlloc, b.HeapInuse - min(b.HeapInuse, a.HeapInuse)
}

// TestHostileMemoryBombs: a binary that runs with a 256 MiB (sparse)
// symbol table, one whose .debug_info is a zlib bomb (1 MiB inflating to a
// GiB), and a 64 MiB perf map. Before, the agent took 2.78 GB, 3.7 GB and
// 3.2 GB. Now each is read up to its cap, what fits is kept, and the heap
// in use stays within the memory caps.
func TestHostileMemoryBombs(t *testing.T) {
	lab := newHostileLab(t)
	symtab := filepath.Join(lab.dir, "cprog-symtab")
	copyFile(t, lab.bin, symtab)
	if err := elfbuild.Patch(symtab, ".symtab", nil, 256<<20, 0); err != nil {
		t.Fatal(err)
	}
	bomb := filepath.Join(lab.dir, "cprog-zlib")
	copyFile(t, lab.bin, bomb)
	inflate := uint64(1 << 30) // 1 MiB of zlib
	if testing.Short() {
		inflate = 256 << 20
	}
	if err := elfbuild.Patch(bomb, ".debug_info", elfbuild.Zlib(4<<30, inflate), 0, elf.SHF_COMPRESSED); err != nil {
		t.Fatal(err)
	}
	lim := Limits{}.withDefaults()
	for _, tc := range []struct {
		name   string
		v      victim
		addrs  func(pid int) []uint64
		want   string // the first frame's function
		reason string
	}{
		{"256 MiB symbol table", victim{bin: symtab}, func(pid int) []uint64 { return runtimeAddrsIn(t, pid, lab.bin, symtab, 1, "slow") }, "", userfile.ReasonSymbols},
		{"zlib bomb as .debug_info", victim{bin: bomb}, func(pid int) []uint64 { return runtimeAddrsIn(t, pid, lab.bin, bomb, 1, "slow") }, "slow", userfile.ReasonDecompressed},
		{"64 MiB perf map", victim{bin: lab.bin, setup: "awk 'BEGIN { for (i = 0; i < 1600000; i++) printf \"%x 10 jit_function_number_%08d_with_a_long_name\\n\", 268435456 + 16*i, i }' > /tmp/perf-$$.map"},
			func(int) []uint64 { return unmapped }, "jit_function_number_00000001_with_a_long_name", userfile.ReasonPerfMapSize},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := userfile.Counts()
			pid, _ := tc.v.start(t)
			addrs := tc.addrs(pid)
			s := New(Config{Timeout: time.Minute})
			defer s.Close()
			var frames []snapshot.Frame
			var err error
			total, inuse := heapAfter(func() { frames, err = s.User(uint32(pid), addrs) })
			if err != nil {
				t.Fatal(err)
			}
			if frames[0].Function != tc.want {
				t.Errorf("frame 0 = %+v, want %q", frames[0], tc.want)
			}
			t.Logf("heap: %d MiB allocated in all, %d MiB in use after, %d MiB in the symbolizer's tables",
				total>>20, inuse>>20, s.Memory()>>20)
			if inuse > uint64(lim.Memory)+32<<20 || s.Memory() > lim.Memory {
				t.Errorf("heap in use %d MiB, tables %d MiB: past the %d MiB cap", inuse>>20, s.Memory()>>20, lim.Memory>>20)
			}
			if total > 8*uint64(lim.Section)+64<<20 {
				t.Errorf("%d MiB allocated in all", total>>20)
			}
			counted(t, tc.reason, before)
		})
	}
}

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	b, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(to, b, 0o755); err != nil {
		t.Fatal(err)
	}
}

// TestPerfMapReread: a miss re-reads the maps at most once a second, and
// the perf map only when it changed: a JIT's big map is not parsed again
// for every miss.
func TestPerfMapReread(t *testing.T) {
	lab := newHostileLab(t)
	pid, _ := victim{bin: lab.bin, setup: "echo '10000000 100 jit_first' > /tmp/perf-$$.map"}.start(t)
	s := New(Config{})
	defer s.Close()
	frames, err := s.User(uint32(pid), unmapped[:1])
	if err != nil || frames[0].Function != "jit_first" {
		t.Fatalf("frames %+v, %v", frames, err)
	}
	perfOf := func() *perfMap {
		s.mu.Lock()
		defer s.mu.Unlock()
		return s.procs[uint32(pid)].perf
	}
	first := perfOf()
	time.Sleep(1100 * time.Millisecond)
	s.User(uint32(pid), []uint64{0x20000000}) // a miss: the maps are read again
	if perfOf() != first {
		t.Error("an unchanged perf map was read again")
	}
	path := fmt.Sprintf("/proc/%d/root/tmp/perf-%d.map", pid, pid)
	if err := os.WriteFile(path, []byte("10000000 100 jit_first\n20000000 100 jit_second\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	time.Sleep(1100 * time.Millisecond)
	frames, _ = s.User(uint32(pid), []uint64{0x20000010})
	if frames[0].Function != "jit_second" || perfOf() == first {
		t.Errorf("after the map changed: %+v", frames[0])
	}
}
