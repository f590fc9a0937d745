//go:build linux

package userevents

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// requireUserEvents skips the test when the kernel has no user_events or the
// test is not root, except inside spanwatch's test VM (SPANWATCH_IN_VM=1,
// set by test/vm/run.sh), whose kernel has them: there it fails, so a broken
// VM cannot pass as a skip.
func requireUserEvents(t testing.TB) {
	t.Helper()
	reason := ""
	if os.Geteuid() != 0 {
		reason = "needs root for user_events_data and perf events"
	} else if _, err := dataFile(); errors.Is(err, ErrNotSupported) {
		reason = err.Error()
	} else if err != nil {
		// Root, on a kernel with tracefs: anything but a missing
		// user_events is a failure, not a reason to skip.
		t.Fatalf("user_events_data: %v", err)
	}
	if reason == "" {
		return
	}
	if os.Getenv("SPANWATCH_IN_VM") == "1" {
		t.Fatalf("SPANWATCH_IN_VM=1 but user_events are unusable: %s", reason)
	}
	t.Skip(reason)
}

// uniqueName returns an event name no other test (or earlier run) uses.
func uniqueName(t testing.TB) string {
	return fmt.Sprintf("swtest_%s_%d", strings.ToLower(strings.NewReplacer("/", "_", " ", "_").Replace(t.Name())), os.Getpid())
}

// onlineCPUs parses /sys/devices/system/cpu/online ("0-3,5").
func onlineCPUs(t testing.TB) []int {
	t.Helper()
	b, err := os.ReadFile("/sys/devices/system/cpu/online")
	if err != nil {
		t.Fatal(err)
	}
	var cpus []int
	for _, r := range strings.Split(strings.TrimSpace(string(b)), ",") {
		lo, hi, found := strings.Cut(r, "-")
		a, err := strconv.Atoi(lo)
		if err != nil {
			t.Fatalf("parse cpu list %q: %v", b, err)
		}
		z := a
		if found {
			if z, err = strconv.Atoi(hi); err != nil {
				t.Fatalf("parse cpu list %q: %v", b, err)
			}
		}
		for c := a; c <= z; c++ {
			cpus = append(cpus, c)
		}
	}
	return cpus
}

// counters are counting perf events on a user_event's tracepoint, one per
// CPU: opening them enables the event, their sum counts the writes the
// kernel delivered to the tracepoint.
type counters []int

func openCounters(t testing.TB, name string) counters {
	t.Helper()
	id, err := EventID(name)
	if err != nil {
		t.Fatal(err)
	}
	var cs counters
	for _, cpu := range onlineCPUs(t) {
		attr := unix.PerfEventAttr{
			Type:   unix.PERF_TYPE_TRACEPOINT,
			Size:   uint32(unsafe.Sizeof(unix.PerfEventAttr{})),
			Config: uint64(id),
		}
		fd, err := unix.PerfEventOpen(&attr, -1, cpu, -1, unix.PERF_FLAG_FD_CLOEXEC)
		if err != nil {
			cs.close()
			t.Fatalf("perf_event_open tracepoint user_events:%s (id %d) cpu %d: %v", name, id, cpu, err)
		}
		cs = append(cs, fd)
	}
	t.Cleanup(cs.close)
	return cs
}

func (cs counters) sum(t testing.TB) uint64 {
	t.Helper()
	var total uint64
	for _, fd := range cs {
		var b [8]byte
		if _, err := unix.Read(fd, b[:]); err != nil {
			t.Fatalf("read perf counter: %v", err)
		}
		total += binary.NativeEndian.Uint64(b[:])
	}
	return total
}

func (cs *counters) close() {
	for _, fd := range *cs {
		unix.Close(fd)
	}
	*cs = nil
}

// waitEnabled polls e.Enabled until it is want: the kernel may update the
// bit from a work queue when the page was not resident.
func waitEnabled(t testing.TB, e *Event, want bool) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Second)
	for e.Enabled() != want {
		if time.Now().After(deadline) {
			t.Fatalf("%s: Enabled() stayed %v for 2s, want %v", e.Name(), !want, want)
		}
		time.Sleep(time.Millisecond)
	}
}

func TestRegisterEnableWrite(t *testing.T) {
	requireUserEvents(t)
	name := uniqueName(t)
	e, err := Register(name + " u64 value; u32 cpu")
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	if e.Enabled() {
		t.Fatal("Enabled() before any tracer attached")
	}
	// Nobody listens: the kernel drops the write (with EBADF, which Write
	// hides: a tracer can detach between Enabled and Write).
	if err := e.Write(make([]byte, 12)); err != nil {
		t.Fatalf("write while disabled: %v", err)
	}

	cs := openCounters(t, name)
	waitEnabled(t, e, true)
	const n = 1000
	payload := make([]byte, 12)
	for i := range n {
		binary.NativeEndian.PutUint64(payload, uint64(i))
		if err := e.Write(payload[:8], payload[8:]); err != nil {
			t.Fatalf("write %d: %v", i, err)
		}
	}
	if got := cs.sum(t); got != n {
		t.Errorf("tracepoint counted %d writes, want %d", got, n)
	}

	err = e.Write(make([]byte, 4))
	if !errors.Is(err, unix.EINVAL) || !strings.Contains(err.Error(), "4-byte payload") {
		t.Errorf("short payload: got %v, want EINVAL naming the 4-byte payload", err)
	}
	if got := cs.sum(t); got != n {
		t.Errorf("after a rejected write the tracepoint counted %d, want %d", got, n)
	}

	cs.close()
	waitEnabled(t, e, false)

	if err := e.Close(); err != nil {
		t.Fatalf("close: %v", err)
	}
	if err := e.Close(); err != nil {
		t.Fatalf("second close: %v", err)
	}
	if err := e.Write(payload); !errors.Is(err, ErrClosed) {
		t.Fatalf("write after close: %v, want ErrClosed", err)
	}
	if e.Enabled() {
		t.Fatal("Enabled() after Close")
	}
}

// registerCounted registers an event with fields and a name unique to the
// test, and enables it with counters on every CPU.
func registerCounted(t testing.TB, fields string) (*Event, counters) {
	t.Helper()
	name := uniqueName(t)
	e, err := Register(name + " " + fields)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	cs := openCounters(t, name)
	waitEnabled(t, e, true)
	return e, cs
}

func TestConcurrentWrites(t *testing.T) {
	requireUserEvents(t)
	e, cs := registerCounted(t, "u64 value")
	const goroutines, each = 8, 500
	var wg sync.WaitGroup
	errs := make(chan error, goroutines)
	for g := range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var b [8]byte
			for i := range each {
				binary.NativeEndian.PutUint64(b[:], uint64(g*each+i))
				if err := e.Write(b[:]); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if got := cs.sum(t); got != goroutines*each {
		t.Errorf("tracepoint counted %d writes, want %d", got, goroutines*each)
	}
}

// TestManyEvents registers more events than one enable word has bits and
// checks that each event's bit is its own.
func TestManyEvents(t *testing.T) {
	requireUserEvents(t)
	const n = 40
	events := make([]*Event, n)
	for i := range events {
		e, err := Register(fmt.Sprintf("%s_%d u32 x", uniqueName(t), i))
		if err != nil {
			t.Fatal(err)
		}
		defer e.Close()
		events[i] = e
	}
	for _, i := range []int{0, 31, 32, 39} {
		cs := openCounters(t, events[i].Name())
		waitEnabled(t, events[i], true)
		for j, e := range events {
			if j != i && e.Enabled() {
				t.Errorf("enabling event %d enabled event %d too", i, j)
			}
		}
		if err := events[i].Write([]byte{1, 2, 3, 4}); err != nil {
			t.Fatal(err)
		}
		if got := cs.sum(t); got != 1 {
			t.Errorf("event %d: counted %d writes, want 1", i, got)
		}
		cs.close()
		waitEnabled(t, events[i], false)
	}
}

func TestRegisterTwice(t *testing.T) {
	requireUserEvents(t)
	name := uniqueName(t)
	a, err := Register(name + " u32 x")
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	b, err := Register(name + " u32 x")
	if err != nil {
		t.Fatalf("attach to an existing event with the same format: %v", err)
	}
	defer b.Close()
	if a.WriteIndex() != b.WriteIndex() {
		t.Errorf("same event on one descriptor got write indexes %d and %d", a.WriteIndex(), b.WriteIndex())
	}
	openCounters(t, name)
	waitEnabled(t, a, true)
	waitEnabled(t, b, true)

	_, err = Register(name + " u64 x")
	if !errors.Is(err, unix.EADDRINUSE) || !strings.Contains(err.Error(), "another format") {
		t.Errorf("same name, other format: got %v, want EADDRINUSE saying so", err)
	}
}

func TestRegisterBadFormat(t *testing.T) {
	requireUserEvents(t)
	for _, format := range []string{
		uniqueName(t) + " u64",          // no field name
		uniqueName(t) + " u128 x",       // no such type
		uniqueName(t) + " char[2000] x", // array too long
		uniqueName(t) + " u64 x 8",      // a size on a non-struct field
	} {
		_, err := Register(format)
		if !errors.Is(err, unix.EINVAL) || !strings.Contains(err.Error(), strconv.Quote(format)) {
			t.Errorf("Register(%q) = %v, want EINVAL naming the format", format, err)
		}
	}
}

func TestDelete(t *testing.T) {
	requireUserEvents(t)
	name := uniqueName(t)
	e, err := Register(name + " u32 x")
	if err != nil {
		t.Fatal(err)
	}
	id, err := EventID(name)
	if err != nil || id == 0 {
		t.Fatalf("EventID(%s) = %d, %v", name, id, err)
	}
	if err := Delete(name); !errors.Is(err, unix.EBUSY) {
		t.Fatalf("delete while registered: %v, want EBUSY", err)
	}
	e.Close()
	// With its last reference gone the kernel (seen on 6.12) deletes the event from
	// a work queue; until then Delete may see it busy.
	deadline := time.Now().Add(2 * time.Second)
	for {
		err = Delete(name)
		if err == nil || errors.Is(err, unix.ENOENT) {
			break
		}
		if !errors.Is(err, unix.EBUSY) || time.Now().After(deadline) {
			t.Fatalf("delete after close: %v", err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if _, err := EventID(name); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("EventID after delete: %v, want not exist", err)
	}
	if err := Delete(name); !errors.Is(err, unix.ENOENT) {
		t.Fatalf("delete twice: %v, want ENOENT", err)
	}
}

// TestNotSupported runs where the kernel has no user_events (the hosts that
// build spanwatch): Register must say so with ErrNotSupported.
func TestNotSupported(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to mount tracefs and tell a missing user_events from a permission problem")
	}
	if _, err := dataFile(); err == nil {
		t.Skip("this kernel has user_events (the tests above cover it)")
	}
	_, err := Register("swtest_unsupported u32 x")
	if !errors.Is(err, ErrNotSupported) || !strings.Contains(err.Error(), "CONFIG_USER_EVENTS=y") {
		t.Fatalf("Register on a kernel without user_events: %v, want ErrNotSupported", err)
	}
	if _, err := EventID("swtest_unsupported"); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("EventID: %v, want not exist", err)
	}
}

func TestRegisterError(t *testing.T) {
	tests := []struct {
		errno      unix.Errno
		callerWord bool
		want       string
	}{
		{unix.EINVAL, false, `rejected format "ev u64"`},
		{unix.EADDRINUSE, false, "already registered with another format"},
		{unix.EADDRINUSE, true, "already registered that enable word and bit, or the event exists with another format"},
		{unix.EMFILE, false, "kernel.user_events_max"},
		{unix.EPERM, false, "permission denied"},
		{unix.ENOMEM, false, "register user_event ev: cannot allocate memory"},
	}
	for _, tt := range tests {
		err := registerError("ev u64", tt.errno, tt.callerWord)
		if !errors.Is(err, tt.errno) || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("registerError(%v, %t) = %v, want it to wrap the errno and say %q", tt.errno, tt.callerWord, err, tt.want)
		}
	}
}

// TestABILayout checks the Go mirrors of include/uapi/linux/user_events.h.
func TestABILayout(t *testing.T) {
	var r userReg
	var u userUnreg
	offsets := []struct {
		name      string
		got, want uintptr
	}{
		{"user_reg.enable_bit", unsafe.Offsetof(r.enableBit), 4},
		{"user_reg.enable_size", unsafe.Offsetof(r.enableSize), 5},
		{"user_reg.flags", unsafe.Offsetof(r.flags), 6},
		{"user_reg.enable_addr", unsafe.Offsetof(r.enableAddr), 8},
		{"user_reg.name_args", unsafe.Offsetof(r.nameArgs), 16},
		{"user_reg.write_index", unsafe.Offsetof(r.writeIndex), 24},
		{"user_reg size", unsafe.Offsetof(r.writeIndex) + 4, userRegSize},
		{"user_unreg.disable_bit", unsafe.Offsetof(u.disableBit), 4},
		{"user_unreg.disable_addr", unsafe.Offsetof(u.disableAddr), 8},
		{"user_unreg size", unsafe.Sizeof(u), userUnregSize},
	}
	for _, o := range offsets {
		if o.got != o.want {
			t.Errorf("%s at %d, want %d", o.name, o.got, o.want)
		}
	}
	// _IOC(dir, type, nr, size) = dir<<30 | size<<16 | type<<8 | nr, with
	// the size of a pointer.
	ioc := func(dir, nr uint32) uint32 { return dir<<30 | 8<<16 | '*'<<8 | nr }
	const iocWrite, iocRead = 1, 2
	for _, c := range []struct {
		name      string
		got, want uint32
	}{
		{"DIAG_IOCSREG", diagIOCSREG, ioc(iocRead|iocWrite, 0)},
		{"DIAG_IOCSDEL", diagIOCSDEL, ioc(iocWrite, 1)},
		{"DIAG_IOCSUNREG", diagIOCSUNREG, ioc(iocWrite, 2)},
	} {
		if c.got != c.want {
			t.Errorf("%s = %#x, want %#x", c.name, c.got, c.want)
		}
	}
}

func BenchmarkEnabled(b *testing.B) {
	requireUserEvents(b)
	e, err := Register(uniqueName(b) + " u64 x")
	if err != nil {
		b.Fatal(err)
	}
	defer e.Close()
	n := 0
	for b.Loop() {
		if e.Enabled() {
			n++
		}
	}
	if n != 0 {
		b.Fatal("enabled without a tracer")
	}
}

// BenchmarkWrite measures a 112-byte write (the size of a span event) with
// a counting perf event attached, so the kernel runs the tracepoint.
func BenchmarkWrite(b *testing.B) {
	requireUserEvents(b)
	e, _ := registerCounted(b, "u64 d; u64 s; u32 st; u32 f; unsigned char[16] t; unsigned char[8] sp; char[64] n")
	payload := make([]byte, 112)
	b.ReportAllocs()
	for b.Loop() {
		if err := e.Write(payload); err != nil {
			b.Fatal(err)
		}
	}
}

func TestRegisterWord(t *testing.T) {
	if _, err := RegisterWord("ev u32 x", nil, 0); err == nil || !strings.Contains(err.Error(), "want a word") {
		t.Errorf("nil word: %v", err)
	}
	var w uint32
	if _, err := RegisterWord("ev u32 x", &w, 32); err == nil || !strings.Contains(err.Error(), "bit 32") {
		t.Errorf("bit 32: %v", err)
	}
	requireUserEvents(t)
	// The caller's word must not move: take it from a page of our own.
	mem, err := unix.Mmap(-1, 0, unix.Getpagesize(), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Munmap(mem)
	word := (*uint32)(unsafe.Pointer(&mem[8]))
	*word = 1 << 2 // bits the caller uses for other things stay as they are
	name := uniqueName(t)
	e, err := RegisterWord(name+" u32 x", word, 5)
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	if _, err := RegisterWord(name+" u32 x", word, 5); !errors.Is(err, unix.EADDRINUSE) || !strings.Contains(err.Error(), "enable word and bit") {
		t.Errorf("same word and bit twice: %v, want EADDRINUSE saying so", err)
	}
	cs := openCounters(t, name)
	waitEnabled(t, e, true)
	if got := atomic.LoadUint32(word); got != 1<<2|1<<5 {
		t.Errorf("word = %#b with a tracer, want %#b", got, 1<<2|1<<5)
	}
	if err := e.Write([]byte{1, 2, 3, 4}); err != nil {
		t.Fatal(err)
	}
	if got := cs.sum(t); got != 1 {
		t.Errorf("counted %d writes, want 1", got)
	}
	cs.close()
	waitEnabled(t, e, false)
	if got := atomic.LoadUint32(word); got != 1<<2 {
		t.Errorf("word = %#b without a tracer, want %#b", got, 1<<2)
	}
}

// TestRegisterFromExitingThread registers from a thread that exits right
// after (a goroutine that ends locked to its thread), then enables, writes
// and unregisters from other threads. The kernel ties enablers to the
// registering thread; the package must not let that thread's exit or a
// different unregistering thread matter.
func TestRegisterFromExitingThread(t *testing.T) {
	requireUserEvents(t)
	name := uniqueName(t)
	type result struct {
		e   *Event
		err error
	}
	done := make(chan result)
	go func() {
		runtime.LockOSThread() // not unlocked: the thread exits with the goroutine
		e, err := Register(name + " u32 x")
		done <- result{e, err}
	}()
	r := <-done
	if r.err != nil {
		t.Fatal(r.err)
	}
	e := r.e
	time.Sleep(50 * time.Millisecond) // let the runtime end that thread
	cs := openCounters(t, name)
	waitEnabled(t, e, true)
	if err := e.Write([]byte{1, 2, 3, 4}); err != nil {
		t.Fatal(err)
	}
	if got := cs.sum(t); got != 1 {
		t.Errorf("counted %d writes, want 1", got)
	}
	cs.close()
	waitEnabled(t, e, false)
	if err := e.Close(); err != nil {
		t.Fatalf("close from another thread: %v", err)
	}
}
