//go:build linux

package userevents

import (
	"bytes"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/unix"
)

// The ioctls of include/uapi/linux/user_events.h. Their size field is that of
// a pointer (the header declares them with "struct user_reg *").
const (
	diagIOCSREG   = 0xc0082a00 // _IOWR('*', 0, struct user_reg *)
	diagIOCSDEL   = 0x40082a01 // _IOW('*', 1, char *)
	diagIOCSUNREG = 0x40082a02 // _IOW('*', 2, struct user_unreg *)
)

// userReg mirrors struct user_reg. The C struct is packed (28 bytes); this
// layout has the same offsets, and size tells the kernel to read 28 bytes.
type userReg struct {
	size       uint32
	enableBit  uint8
	enableSize uint8
	flags      uint16
	enableAddr uint64
	nameArgs   uint64
	writeIndex uint32
}

const userRegSize = 28

// userUnreg mirrors struct user_unreg (16 bytes, packed).
type userUnreg struct {
	size        uint32
	disableBit  uint8
	_           uint8
	_           uint16
	disableAddr uint64
}

const userUnregSize = 16

// bitsPerPage is how many enable bits one mmap'd page holds.
var bitsPerPage = unix.Getpagesize() * 8

// process holds what all Events of the process share: the user_events_data
// descriptor (open while any Event is) and the pages of enable words. Pages
// are never unmapped and bits never reused, so an Event's word stays valid
// memory after Close; the kernel clears the bit on unregister.
var process = processState{fd: -1}

type processState struct {
	sync.Mutex
	fd    int // -1 while no Event is open
	refs  int
	pages []unsafe.Pointer
	next  int // next unused enable bit, across pages
}

// An Event is a user_event registered by this process. Its methods are safe
// for concurrent use.
type Event struct {
	name  string
	word  *uint32 // enable word, on an mmap'd page the kernel writes
	mask  uint32
	bit   uint8
	index uint32 // write_index, the first 4 bytes of every write

	mu     sync.RWMutex // held for reading by Write, for writing by Close
	closed bool
	fd     int
}

// Register registers the user_event described by format, or attaches to it
// if a process already registered it with the same format. The format is the
// event name, a space, then the fields separated by ";", for example
// "spanwatch_span u64 duration_ns; u64 start_ns" (see Format and Field).
//
// It needs kernel 6.4+ with CONFIG_USER_EVENTS=y (else the error wraps
// ErrNotSupported) and write access to <tracefs>/user_events_data; it mounts
// tracefs when needed and allowed (see TracefsDir).
func Register(format string) (*Event, error) {
	return register(format, nil, 0)
}

// RegisterWord is Register with the enable bit in a word the caller owns,
// for callers that fold the enable check into a word of their own (the span
// SDK keeps it beside its uprobe reference counter so that one load tells
// whether anybody listens). word must never move and must stay mapped while
// the event is registered: a package variable or an mmap'd page, never the
// Go heap. bit is 0 to 31; a process cannot register the same word and bit
// twice (EADDRINUSE).
func RegisterWord(format string, word *uint32, bit uint8) (*Event, error) {
	if word == nil || bit > 31 {
		return nil, fmt.Errorf("register user_event %s: enable word %p bit %d: want a word and a bit from 0 to 31", eventName(format), word, bit)
	}
	return register(format, word, bit)
}

// register registers format with its enable bit at word and bit, or at the
// next unused bit of the process's enable pages when word is nil.
func register(format string, word *uint32, bit uint8) (*Event, error) {
	format = strings.TrimSpace(format)
	name := eventName(format)
	if err := checkName(name); err != nil {
		return nil, fmt.Errorf("register user_event from format %q: %w", format, err)
	}
	process.Lock()
	defer process.Unlock()
	if process.fd < 0 {
		fd, err := openData()
		if err != nil {
			return nil, fmt.Errorf("register user_event %s: %w", name, err)
		}
		process.fd = fd
	}
	own := word == nil
	if own {
		var err error
		if word, bit, err = nextBit(); err != nil {
			process.closeIfUnused()
			return nil, fmt.Errorf("register user_event %s: %w", name, err)
		}
	}
	args := append([]byte(format), 0)
	reg := userReg{
		size:       userRegSize,
		enableBit:  bit,
		enableSize: 4,
		enableAddr: uint64(uintptr(unsafe.Pointer(word))),
		nameArgs:   uint64(uintptr(unsafe.Pointer(&args[0]))),
	}
	var errno unix.Errno
	onIoctlThread(func() {
		_, _, errno = unix.Syscall(unix.SYS_IOCTL, uintptr(process.fd), diagIOCSREG, uintptr(unsafe.Pointer(&reg)))
	})
	runtime.KeepAlive(args)
	if errno != 0 {
		process.closeIfUnused()
		return nil, registerError(format, errno, !own)
	}
	if own {
		process.next++ // the bit is used only once it is registered
	}
	process.refs++
	return &Event{
		name:  name,
		word:  word,
		mask:  1 << bit,
		bit:   bit,
		index: reg.writeIndex,
		fd:    process.fd,
	}, nil
}

// registerError explains a DIAG_IOCSREG failure; callerWord is set when the
// enable word is the caller's (RegisterWord).
func registerError(format string, errno unix.Errno, callerWord bool) error {
	name := eventName(format)
	if errno == unix.EADDRINUSE && callerWord {
		return fmt.Errorf("register user_event %s: this process already registered that enable word and bit, or the event exists with another format than %q: %w", name, format, errno)
	}
	switch errno {
	case unix.EINVAL:
		return fmt.Errorf("register user_event %s: the kernel rejected format %q (want \"name type field; type field\", types u8..u64, s8..s64, char[N], __rel_loc char[], struct NAME field SIZE): %w", name, format, errno)
	case unix.EADDRINUSE:
		return fmt.Errorf("register user_event %s: already registered with another format than %q (delete it or use another name): %w", name, format, errno)
	case unix.EMFILE:
		return fmt.Errorf("register user_event %s: the kernel's limit of user_events is reached (see sysctl kernel.user_events_max): %w", name, errno)
	case unix.EPERM, unix.EACCES:
		return fmt.Errorf("register user_event %s: permission denied (run as root or with CAP_PERFMON): %w", name, errno)
	}
	return fmt.Errorf("register user_event %s: %w", name, errno)
}

// openData opens user_events_data.
func openData() (int, error) {
	path, err := dataFile()
	if err != nil {
		return -1, err
	}
	fd, err := unix.Open(path, unix.O_RDWR|unix.O_CLOEXEC, 0)
	if errors.Is(err, unix.EACCES) || errors.Is(err, unix.EPERM) {
		return -1, fmt.Errorf("open %s: %w (run as root, or give this user read-write access to the file, e.g. chmod o+rw %s or mount tracefs with gid=GROUP)", path, err, path)
	}
	if err != nil {
		return -1, fmt.Errorf("open %s: %w", path, err)
	}
	return fd, nil
}

// nextBit returns the word and bit of the next unused enable bit, mapping a
// new page when the last one is full. process must be locked.
func nextBit() (*uint32, uint8, error) {
	page, off := process.next/bitsPerPage, process.next%bitsPerPage
	if page == len(process.pages) {
		mem, err := unix.Mmap(-1, 0, unix.Getpagesize(), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
		if err != nil {
			return nil, 0, fmt.Errorf("mmap enable page: %w", err)
		}
		process.pages = append(process.pages, unsafe.Pointer(&mem[0]))
	}
	word := (*uint32)(unsafe.Add(process.pages[page], off/32*4))
	return word, uint8(off % 32), nil
}

// closeIfUnused closes the descriptor when no Event holds it. process must
// be locked.
func (p *processState) closeIfUnused() {
	if p.refs == 0 && p.fd >= 0 {
		unix.Close(p.fd)
		p.fd = -1
	}
}

// Name returns the event's name.
func (e *Event) Name() string { return e.name }

// Enabled reports whether any tracer (perf, ftrace, a BPF collector) has the
// event enabled, so a caller can skip building a payload nobody reads. It is
// one atomic load of the word the kernel updates.
func (e *Event) Enabled() bool {
	return atomic.LoadUint32(e.word)&e.mask != 0
}

// WriteIndex returns the index the kernel assigned to the event on this
// process's user_events_data descriptor; every write starts with it.
func (e *Event) WriteIndex() uint32 { return e.index }

// Write emits one event whose payload is the concatenation of payload, in
// one writev(2): the write index, then each slice. The kernel rejects a
// payload shorter than the format's fixed fields (EINVAL). A write while no
// tracer has the event enabled is dropped: the kernel answers EBADF, which
// Write reports as success, since a tracer may detach between a caller's
// Enabled check and its write. Check Enabled first to save building the
// payload.
func (e *Event) Write(payload ...[]byte) error {
	// Up to 7 payload slices fit an iovec array on the stack; more are
	// joined first (rare, and it allocates).
	var iov [8]unix.Iovec
	if len(payload) >= len(iov) {
		return e.Write(bytes.Join(payload, nil))
	}
	iov[0] = unix.Iovec{Base: (*byte)(unsafe.Pointer(&e.index)), Len: 4}
	n := 1
	for _, p := range payload {
		if len(p) > 0 {
			iov[n] = unix.Iovec{Base: &p[0], Len: uint64(len(p))}
			n++
		}
	}
	e.mu.RLock()
	if e.closed {
		e.mu.RUnlock()
		return ErrClosed
	}
	_, _, errno := unix.Syscall(unix.SYS_WRITEV, uintptr(e.fd), uintptr(unsafe.Pointer(&iov[0])), uintptr(n))
	e.mu.RUnlock()
	runtime.KeepAlive(payload)
	if errno != 0 && errno != unix.EBADF {
		return e.writeError(payload, errno)
	}
	return nil
}

func (e *Event) writeError(payload [][]byte, errno unix.Errno) error {
	n := 0
	for _, p := range payload {
		n += len(p)
	}
	switch errno {
	case unix.EINVAL:
		return fmt.Errorf("write user_event %s: the kernel rejected the %d-byte payload (shorter than the format's fixed fields, or a bad __rel_loc/__data_loc): %w", e.name, n, errno)
	case unix.ENOENT:
		return fmt.Errorf("write user_event %s: the kernel does not know write index %d: %w", e.name, e.index, errno)
	}
	return fmt.Errorf("write user_event %s: %w", e.name, errno)
}

// Close unregisters the event from this process (DIAG_IOCSUNREG): the kernel
// stops updating its enable bit and clears it. The event itself stays in the
// kernel while other processes or tracers use it; on current kernels (seen
// on 6.12) it is deleted when the last of them lets go. Close is idempotent;
// Write after Close returns ErrClosed.
func (e *Event) Close() error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed {
		return nil
	}
	e.closed = true
	unreg := userUnreg{
		size:        userUnregSize,
		disableBit:  e.bit,
		disableAddr: uint64(uintptr(unsafe.Pointer(e.word))),
	}
	var errno unix.Errno
	onIoctlThread(func() {
		_, _, errno = unix.Syscall(unix.SYS_IOCTL, uintptr(e.fd), diagIOCSUNREG, uintptr(unsafe.Pointer(&unreg)))
	})
	process.Lock()
	process.refs--
	process.closeIfUnused()
	process.Unlock()
	if errno != 0 {
		return fmt.Errorf("unregister user_event %s: %w", e.name, errno)
	}
	return nil
}

// Delete deletes the user_event called name from the kernel (DIAG_IOCSDEL).
// It fails with EBUSY while any process has the event registered (including
// this one: Close its Events first) or a tracer has it enabled.
func Delete(name string) error {
	if err := checkName(name); err != nil {
		return fmt.Errorf("delete user_event: %w", err)
	}
	fd, err := openData()
	if err != nil {
		return fmt.Errorf("delete user_event %s: %w", name, err)
	}
	defer unix.Close(fd)
	arg := append([]byte(name), 0)
	_, _, errno := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), diagIOCSDEL, uintptr(unsafe.Pointer(&arg[0])))
	runtime.KeepAlive(arg)
	switch errno {
	case 0:
		return nil
	case unix.EBUSY:
		return fmt.Errorf("delete user_event %s: in use by a process that registered it or a tracer that enabled it: %w", name, errno)
	case unix.ENOENT:
		return fmt.Errorf("delete user_event %s: no such event: %w", name, errno)
	case unix.EPERM:
		return fmt.Errorf("delete user_event %s: a persistent event needs CAP_PERFMON to delete: %w", name, errno)
	}
	return fmt.Errorf("delete user_event %s: %w", name, errno)
}
