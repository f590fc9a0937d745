//go:build linux

package inflight

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"testing"
	"time"
	"unsafe"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/ringbuf"
	"golang.org/x/sys/unix"

	"github.com/spanwatch/spanwatch/bpf"
	"github.com/spanwatch/spanwatch/internal/bpftest"
	"github.com/spanwatch/spanwatch/internal/kernel"
	"github.com/spanwatch/spanwatch/internal/symbolize"
	"github.com/spanwatch/spanwatch/snapshot"
)

// maps are the core's and the USDT object's maps the watcher works on,
// created from the real specs.
type maps struct {
	inflight, sources, budgets, overruns, counters, taskStart, taskNames *ebpf.Map
}

// requireSamplers skips a test of the samplers where the kernel lacks
// what they need (and fails it where its release should have it).
func requireSamplers(t testing.TB) {
	t.Helper()
	bpftest.Require(t, kernel.CopyFromUserTask, kernel.Loop, kernel.TaskStorage)
}

func newMaps(t testing.TB) maps {
	t.Helper()
	requireSamplers(t)
	usdt, err := bpf.LoadUsdt()
	if err != nil {
		t.Fatal(err)
	}
	core, err := bpf.LoadSpanwatch()
	if err != nil {
		t.Fatal(err)
	}
	var m maps
	for _, x := range []struct {
		dst  **ebpf.Map
		spec *ebpf.MapSpec
	}{
		{&m.inflight, usdt.Maps["usdt_inflight"]},
		{&m.sources, usdt.Maps["usdt_sources"]},
		{&m.budgets, core.Maps["budgets"]},
		{&m.overruns, core.Maps["overruns"]},
		{&m.counters, core.Maps["counters"]},
	} {
		mp, err := ebpf.NewMap(x.spec)
		if err != nil {
			bpftest.SkipUnlessLoaded(t, "create BPF map "+x.spec.Name, err)
		}
		t.Cleanup(func() { mp.Close() })
		*x.dst = mp
	}
	// Task storage needs 5.11+: without it, only the task variants skip.
	if mp, err := ebpf.NewMap(usdt.Maps["usdt_task_start"]); err == nil {
		t.Cleanup(func() { mp.Close() })
		m.taskStart = mp
	}
	if mp, err := ebpf.NewMap(usdt.Maps["usdt_task_names"]); err == nil {
		t.Cleanup(func() { mp.Close() })
		m.taskNames = mp
	}
	return m
}

func nameBytes(s string) (b [snapshot.NameLen]int8) {
	for i := 0; i < len(s) && i < len(b); i++ {
		b[i] = int8(s[i])
	}
	return b
}

// startBusy builds and starts testdata/busy.c in mode ("spin" or "nap"):
// its span runs in slow until stdin closes.
func startBusy(t *testing.T, mode string) (*exec.Cmd, io.WriteCloser) {
	t.Helper()
	return startProgram(t, "busy", mode)
}

// startProgram builds and starts the test program name (testdata, built
// by bpftest.CProgram) with args, and waits for its "ready" line; it is
// killed at the test's end, or ends when stdin closes.
func startProgram(t *testing.T, name string, args ...string) (*exec.Cmd, io.WriteCloser) {
	t.Helper()
	bin := bpftest.CProgram(t, name)
	cmd := exec.Command(bin, args...)
	stdin, _ := cmd.StdinPipe()
	stdout, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { stdin.Close(); cmd.Process.Kill(); cmd.Wait() })
	if line, err := bufio.NewReader(stdout).ReadString('\n'); err != nil || line != "ready\n" {
		t.Fatalf("read ready: %q, %v", line, err)
	}
	return cmd, stdin
}

func functions(frames []snapshot.Frame) []string {
	out := make([]string, len(frames))
	for i, f := range frames {
		out[i] = f.Function
	}
	return out
}

// TestStuckSpan puts a span of a running test program in usdt_inflight,
// two seconds old against a 100ms budget, as usdt_start would, and checks
// that the watcher samples that thread: on the CPU while it spins, off the
// CPU while it sleeps in poll, each time with the program's call chain,
// and only as many times as asked.
func TestStuckSpan(t *testing.T) {
	for _, tc := range []struct {
		mode string
		// via is where the span's start is: "map" (usdt_inflight) or
		// "task" (usdt_task_start, task storage).
		via string
		cfg Config
		// The innermost user frames expected; a thread in a system call
		// is seen from libc's poll or read wrapper, frameless on x86-64,
		// which hides slow (its caller's frame is the one the walk
		// starts from). On arm64 the wrapper keeps a frame record (x29,
		// x30: its return address into slow), so slow is there too:
		// [poll slow c b a main] in Debian 12's arm64 glibc.
		want   []string
		kernel string // a kernel frame expected, "" for none
	}{
		{"spin", "map", Config{NoOffCPU: true, NoBlocked: true}, []string{"slow", "c", "b", "a", "main"}, ""},
		{"nap", "map", Config{NoOnCPU: true, NoBlocked: true}, []string{"c", "b", "a", "main"}, "poll"},
		{"spin", "task", Config{NoOffCPU: true, NoBlocked: true}, []string{"slow", "c", "b", "a", "main"}, ""},
		{"nap", "task", Config{NoOnCPU: true, NoBlocked: true}, []string{"c", "b", "a", "main"}, "poll"},
		// Blocked in read before the watch began and throughout: only the
		// blocked-thread iterator sees it.
		{"block", "map", Config{NoOnCPU: true, NoOffCPU: true}, []string{"c", "b", "a", "main"}, "read"},
		{"block", "task", Config{NoOnCPU: true, NoOffCPU: true}, []string{"c", "b", "a", "main"}, "read"},
	} {
		t.Run(tc.mode+"/"+tc.via, func(t *testing.T) {
			m := newMaps(t)
			cmd, stdin := startBusy(t, tc.mode)
			pid := uint32(cmd.Process.Pid)

			const span, budget = "stuck", 100 * time.Millisecond
			src := bpf.UsdtUsdtSource{Name: nameBytes(span), NameArg: noArg, KeyArg: noArg, ValueArg: noArg}
			if err := m.sources.Put(uint32(7), &src); err != nil {
				t.Fatal(err)
			}
			if err := m.budgets.Put(&bpf.SpanwatchBudgetKey{NameId: snapshot.NameID(span)}, &bpf.SpanwatchBudget{BudgetNs: uint64(budget), Flags: captureUser}); err != nil {
				t.Fatal(err)
			}
			now, _ := monotonicNs()
			start := now - uint64(2*time.Second)
			key := bpf.UsdtUsdtInflightKey{Source: 7, Tgid: pid, Key: uint64(pid)}
			var pidfd int
			cfg := tc.cfg
			cfg.Inflight, cfg.Sources, cfg.Budgets, cfg.Overruns, cfg.Counters = m.inflight, m.sources, m.budgets, m.overruns, m.counters
			if tc.via == "map" {
				if err := m.inflight.Put(&key, &bpf.UsdtUsdtInflight{StartNs: start}); err != nil {
					t.Fatal(err)
				}
			} else {
				if m.taskStart == nil {
					t.Skip("skipping: no task storage (needs kernel 5.11+)")
				}
				// As usdt_start does for source 7: an open span on
				// the thread's stack.
				var err error
				if pidfd, err = unix.PidfdOpen(int(pid), 0); errors.Is(err, unix.ENOSYS) {
					t.Skipf("skipping: no pidfd_open (kernel 5.3+): %v", err)
				} else if err != nil {
					t.Fatalf("pidfd_open: %v", err)
				}
				defer unix.Close(pidfd)
				var spans bpf.InflightUsdtTaskSpans
				spans.S[0] = bpf.InflightTaskSpan{StartNs: start, Source: 7}
				spans.Pos, spans.Depth = 1, 1
				if err := m.taskStart.Put(int32(pidfd), &spans); err != nil {
					t.Fatal(err)
				}
				cfg.TaskStart, cfg.TaskNames = m.taskStart, m.taskNames
			}
			cfg.Samples = 2
			w, err := New(cfg)
			if err != nil {
				bpftest.SkipUnlessLoaded(t, "load the inflight programs", err)
			}
			defer w.Close()
			rd, err := ringbuf.NewReader(m.overruns)
			if err != nil {
				t.Fatal(err)
			}
			defer rd.Close()

			if tc.mode == "block" {
				// Sampled only once asleep: a running thread is the CPU
				// clock's, which this case turns off.
				waitSleeping(t, pid)
			}
			if err := w.Scan(); err != nil {
				t.Fatal(err)
			}
			// The thread is watched, with the samples asked for or
			// fewer: the CPU clock may have taken them all between the
			// scan and this look (a spinning thread on Debian's 6.1 in
			// the arm64 VM, where this look takes long under TCG).
			wantActive := !cfg.NoOnCPU || !cfg.NoOffCPU
			if n := watchedAny(t, w, pid, cfg.Samples); tc.mode != "block" && n != 1 || w.Active() != wantActive {
				t.Fatalf("after the scan: %d threads watched, active %v; want 1, %v", n, w.Active(), wantActive)
			}
			sym := symbolize.New(symbolize.Config{})
			defer sym.Close()
			if err := sym.Capture(pid); err != nil {
				t.Fatal(err)
			}
			rd.SetDeadline(time.Now().Add(15 * time.Second))
			for i := 0; i < cfg.Samples; i++ {
				if tc.mode == "block" && i > 0 {
					// A thread that stays blocked is sampled once a scan.
					if err := w.Scan(); err != nil {
						t.Fatal(err)
					}
				}
				rec, err := rd.Read()
				if err != nil {
					t.Fatalf("sample %d: %v", i, err)
				}
				r := *(*bpf.SpanwatchOverrun)(unsafe.Pointer(&rec.RawSample[0]))
				wantStatus := uint32(StatusStillRunning)
				if tc.mode != "spin" {
					wantStatus |= StatusOffCPU
				}
				if r.Pid != pid || r.Tid != pid || r.Status != wantStatus || r.Source != sourceUSDT || r.NameId != snapshot.NameID(span) || r.BudgetNs != uint64(budget) {
					t.Errorf("sample %d: pid %d tid %d status %#x (want %#x) source %d name id %#x budget %d", i, r.Pid, r.Tid, r.Status, wantStatus, r.Source, r.NameId, r.BudgetNs)
				}
				if got := snapshot.NameString(unsafe.Slice((*byte)(unsafe.Pointer(&r.Name[0])), len(r.Name))); got != span {
					t.Errorf("sample %d: name %q", i, got)
				}
				if r.DurationNs < uint64(2*time.Second) || r.TsNs-r.DurationNs != start {
					t.Errorf("sample %d: duration %v, want the time since the start", i, time.Duration(r.DurationNs))
				}
				if r.UstackLen <= 0 {
					t.Fatalf("sample %d: user stack error %d", i, r.UstackLen)
				}
				ustack, err := sym.User(pid, r.Ustack[:r.UstackLen/8])
				if err != nil {
					t.Fatal(err)
				}
				got := functions(ustack)
				t.Logf("sample %d user: %v", i, got)
				want := tc.want
				if runtime.GOARCH == "arm64" && want[0] != "slow" {
					want = append([]string{"slow"}, want...)
				}
				if j := index(got, want[0]); j < 0 || j > 1 || j+len(want) > len(got) || strings.Join(got[j:j+len(want)], ",") != strings.Join(want, ",") {
					t.Errorf("sample %d: user stack %v, want %v", i, got, want)
				}
				if tc.kernel != "" {
					kstack, err := sym.Kernel(r.Kstack[:max(0, r.KstackLen)/8])
					if errors.Is(err, symbolize.ErrKernelHidden) {
						continue
					}
					kf := functions(kstack)
					t.Logf("sample %d kernel: %v", i, kf)
					if !strings.Contains(strings.Join(kf, ","), tc.kernel) {
						t.Errorf("sample %d: kernel stack %v has no %q", i, kf, tc.kernel)
					}
				}
			}

			// Sampled as often as asked: the next scan retires the thread
			// and detaches; later scans do not sample the span again.
			time.Sleep(50 * time.Millisecond)
			for range 2 {
				if err := w.Scan(); err != nil {
					t.Fatal(err)
				}
			}
			if watched(t, w) != 0 || w.Active() {
				t.Errorf("after the samples: %d threads with samples to take, active %v; want 0, false", watched(t, w), w.Active())
			}
			rd.SetDeadline(time.Now().Add(300 * time.Millisecond))
			if rec, err := rd.Read(); err == nil {
				t.Errorf("an extra sample after %d: %d bytes", cfg.Samples, len(rec.RawSample))
			}

			// When the span ends (usdt_end deletes it or clears its slot),
			// the thread is forgotten; a new span would be sampled.
			if tc.via == "map" {
				m.inflight.Delete(&key)
			} else if err := m.taskStart.Put(int32(pidfd), &bpf.InflightUsdtTaskSpans{}); err != nil {
				t.Fatal(err)
			}
			if err := w.Scan(); err != nil {
				t.Fatal(err)
			}
			var (
				k      bpf.InflightInflightExecKey
				target bpf.InflightInflightTarget
			)
			if len(w.watching) != 0 || w.objs.InflightWatch.Iterate().Next(&k, &target) {
				t.Errorf("after the end: watching %v, watch entry for %+v: %+v", w.watching, k, target)
			}
			stdin.Close()
		})
	}
}

func index(s []string, x string) int {
	for i, v := range s {
		if v == x {
			return i
		}
	}
	return -1
}

// watched counts the threads with samples left to take.
func watched(t *testing.T, w *Watcher) int {
	t.Helper()
	n := 0
	var (
		k      bpf.InflightInflightExecKey
		target bpf.InflightInflightTarget
	)
	for it := w.objs.InflightWatch.Iterate(); it.Next(&k, &target); {
		if target.Samples > 0 {
			n++
		}
	}
	return n
}

// watchedAny counts the threads of process pid watched with at most
// samples left to take, also those whose samples are taken.
func watchedAny(t *testing.T, w *Watcher, pid uint32, samples int) int {
	t.Helper()
	n := 0
	var (
		k      bpf.InflightInflightExecKey
		target bpf.InflightInflightTarget
	)
	for it := w.objs.InflightWatch.Iterate(); it.Next(&k, &target); {
		if target.Pid == pid && target.Samples <= int32(samples) {
			n++
		}
	}
	return n
}

func TestDecodeStatus(t *testing.T) {
	for _, tc := range []struct {
		status         uint32
		err, stillRuns bool
	}{{0, false, false}, {1, true, false}, {StatusStillRunning, false, true}, {StatusStillRunning | 1, true, true}, {StatusStillRunning | StatusOffCPU, false, true}} {
		if e, r := DecodeStatus(tc.status); e != tc.err || r != tc.stillRuns {
			t.Errorf("DecodeStatus(%#x) = %v, %v; want %v, %v", tc.status, e, r, tc.err, tc.stillRuns)
		}
	}
}

// waitSleeping waits until process pid sleeps (state S in /proc/PID/stat).
func waitSleeping(t *testing.T, pid uint32) {
	t.Helper()
	for range 500 {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			t.Fatal(err)
		}
		if f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:])); len(f) > 0 && f[0] == "S" {
			return
		}
		time.Sleep(2 * time.Millisecond)
	}
	t.Fatalf("process %d never slept", pid)
}
