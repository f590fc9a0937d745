package symbolize

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/spanwatch/spanwatch/snapshot"
)

// Config configures a Symbolizer. The zero value works.
type Config struct {
	Logger *slog.Logger
	// ProcRoot is where procfs is mounted; "/proc" when empty.
	ProcRoot string
	// Retain is how long a process's captured mappings and open files are
	// kept after its last Capture, so that records read after the process
	// exited still symbolize. 5 minutes when zero.
	Retain time.Duration
	// MaxProcesses bounds the number of processes kept; the least recently
	// captured go first. 4096 when zero.
	MaxProcesses int
	// Kallsyms is the kernel symbol file; "/proc/kallsyms" when empty.
	Kallsyms string
	// DpkgInfo is dpkg's database of installed files, where Explain
	// finds the package of a stripped binary; "/var/lib/dpkg/info" when
	// empty.
	DpkgInfo string
}

// A Symbolizer turns user and kernel stack addresses into frames. It is
// safe for concurrent use.
type Symbolizer struct {
	cfg Config
	log *slog.Logger

	mu      sync.Mutex
	procs   map[uint32]*process
	modules map[fileKey]*module
	kernel  *kallsyms
	kerr    error
	kread   time.Time
	closed  bool
	// anchors are traced binaries with their probe sites (AddAnchor).
	anchors map[fileKey]*anchorMod
	// unnamed explains, by build id, the binaries without symbols seen.
	unnamed map[string]string

	noMapFiles bool // tests: open through /proc/PID/root only
}

// fileKey identifies a mapped file the way /proc/PID/maps does.
type fileKey struct{ dev, inode uint64 }

// A process is what Capture saw of one exec of one process.
type process struct {
	pid      uint32
	key      procKey
	mappings []mapping // executable regions by start address
	perf     *perfMap  // nil when the process has none
	perfPath string
	captured time.Time
	refresh  time.Time // last re-read of maps after a miss
}

type mapping struct {
	start, end, offset uint64
	name               string  // Frame.Module
	mod                *module // nil for anonymous or unreadable regions
}

// New returns a Symbolizer. It opens nothing until the first Capture.
func New(cfg Config) *Symbolizer {
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if cfg.ProcRoot == "" {
		cfg.ProcRoot = "/proc"
	}
	if cfg.Retain == 0 {
		cfg.Retain = 5 * time.Minute
	}
	if cfg.MaxProcesses == 0 {
		cfg.MaxProcesses = 4096
	}
	if cfg.Kallsyms == "" {
		cfg.Kallsyms = filepath.Join(cfg.ProcRoot, "kallsyms")
	}
	if cfg.DpkgInfo == "" {
		cfg.DpkgInfo = "/var/lib/dpkg/info"
	}
	return &Symbolizer{
		cfg:     cfg,
		log:     cfg.Logger,
		procs:   map[uint32]*process{},
		modules: map[fileKey]*module{},
	}
}

// ErrClosed is returned by Capture, User and Kernel after Close.
var ErrClosed = errors.New("symbolizer closed")

// Capture records the memory map of process pid and opens the files mapped
// executable in it (through /proc/PID/map_files, which reaches into
// containers and deleted files, else /proc/PID/root), so that its stacks
// symbolize even after it exits. Call it as soon as a record for pid
// arrives. It is cheap when nothing changed: one read of /proc/PID/stat
// tells whether the process exec'd since its last capture.
func (s *Symbolizer) Capture(pid uint32) error {
	key, err := readProcKey(s.cfg.ProcRoot, pid)
	if err != nil {
		return fmt.Errorf("capture process %d: %w", pid, err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return ErrClosed
	}
	now := time.Now()
	if p := s.procs[pid]; p != nil && p.key == key {
		p.captured = now
		return nil
	}
	p, err := s.capture(pid, key)
	if err != nil {
		return fmt.Errorf("capture process %d: %w", pid, err)
	}
	p.captured = now
	if old := s.procs[pid]; old != nil {
		s.release(old)
	}
	s.procs[pid] = p
	s.evict(now)
	return nil
}

// capture reads maps and the perf map and opens the modules. s.mu is held.
func (s *Symbolizer) capture(pid uint32, key procKey) (*process, error) {
	dir := filepath.Join(s.cfg.ProcRoot, strconv.FormatUint(uint64(pid), 10))
	b, err := os.ReadFile(filepath.Join(dir, "maps"))
	if err != nil {
		return nil, err
	}
	regions, err := parseMaps(b)
	if err != nil {
		return nil, err
	}
	if len(regions) == 0 {
		// A kernel thread, or a process past exit_mm: nothing to keep.
		return nil, fmt.Errorf("no executable mappings (kernel thread or exiting process)")
	}
	p := &process{pid: pid, key: key, mappings: make([]mapping, 0, len(regions))}
	for _, r := range regions {
		m := mapping{start: r.start, end: r.end, offset: r.offset, name: r.path}
		if r.inode != 0 && strings.HasPrefix(r.path, "/") {
			m.name = filepath.Base(strings.TrimSuffix(r.path, " (deleted)"))
			m.mod = s.openModule(dir, r)
		} else if r.path == "[vdso]" {
			m.mod = s.vdsoModule(dir, r)
		} else if r.path == "" {
			m.name = "[anon]"
		}
		p.mappings = append(p.mappings, m)
	}
	sort.Slice(p.mappings, func(i, j int) bool { return p.mappings[i].start < p.mappings[j].start })
	s.readPerfMap(p, dir)
	return p, nil
}

// readPerfMap looks for the process's perf map inside its own root (a
// container's /tmp), named after its PID in its own namespace, then on the
// host.
func (s *Symbolizer) readPerfMap(p *process, dir string) {
	nspid := readNSPid(s.cfg.ProcRoot, p.pid)
	candidates := []string{filepath.Join(dir, "root", "tmp", fmt.Sprintf("perf-%d.map", nspid))}
	if nspid != p.pid {
		candidates = append(candidates, fmt.Sprintf("/tmp/perf-%d.map", p.pid))
	}
	for _, path := range candidates {
		pm, err := readPerfMap(path)
		if err != nil {
			s.log.Debug("perf_map_unreadable", "pid", p.pid, "path", path, "error", err)
			continue
		}
		if pm != nil {
			p.perf, p.perfPath = pm, path
			return
		}
	}
}

// openModule returns the shared module for a mapped file, opening it on
// first sight. It returns nil when the file cannot be opened. s.mu is held.
func (s *Symbolizer) openModule(dir string, r mapRegion) *module {
	k := fileKey{dev: r.dev, inode: r.inode}
	if m := s.modules[k]; m != nil {
		m.refs++
		return m
	}
	// map_files names the exact mapped file, even when deleted or in
	// another mount namespace; it needs CAP_SYS_ADMIN or
	// CAP_CHECKPOINT_RESTORE. The path under /proc/PID/root may name a
	// different file if it was replaced, so the inode is checked there.
	f, err := os.Open(filepath.Join(dir, "map_files", fmt.Sprintf("%x-%x", r.start, r.end)))
	if s.noMapFiles && err == nil {
		f.Close()
		err = os.ErrPermission
	}
	if err != nil {
		f, err = os.Open(filepath.Join(dir, "root", strings.TrimSuffix(r.path, " (deleted)")))
		if err == nil && replaced(f, r) {
			f.Close()
			err = fmt.Errorf("file was replaced since it was mapped")
		}
	}
	if err != nil {
		s.log.Debug("module_unreadable", "path", r.path, "error", err)
		return nil
	}
	m := newModule(f, r.path)
	m.key, m.refs = k, 1
	m.debugDirs = []string{filepath.Join(dir, "root", "usr", "lib", "debug"), "/usr/lib/debug"}
	s.modules[k] = m
	return m
}

// replaced reports whether f, opened by path, is not the file mapped at r.
// Maps shows the device and inode of the file the kernel mapped, which for
// overlayfs (container images) is the layer's file, while fstat through the
// overlay may show the overlay's device: the inodes are compared only when
// the devices agree, as a different device says nothing either way.
func replaced(f *os.File, r mapRegion) bool {
	var st syscall.Stat_t
	if err := syscall.Fstat(int(f.Fd()), &st); err != nil {
		return true
	}
	dev := uint64(unix.Major(uint64(st.Dev)))<<32 | uint64(unix.Minor(uint64(st.Dev)))
	return dev == r.dev && st.Ino != r.inode
}

// vdsoKey stands for the vDSO, which the kernel maps into every process:
// one image per kernel, read once.
var vdsoKey = fileKey{dev: ^uint64(0)}

// vdsoModule reads the vDSO's ELF image from the process's memory (it is
// no file), so frames in clock_gettime and friends get names. s.mu is held.
func (s *Symbolizer) vdsoModule(dir string, r mapRegion) *module {
	if m := s.modules[vdsoKey]; m != nil {
		m.refs++
		return m
	}
	f, err := os.Open(filepath.Join(dir, "mem"))
	if err != nil {
		s.log.Debug("vdso_unreadable", "error", err)
		return nil
	}
	defer f.Close()
	buf := make([]byte, r.end-r.start)
	if _, err := f.ReadAt(buf, int64(r.start)); err != nil {
		s.log.Debug("vdso_unreadable", "error", err)
		return nil
	}
	m := &module{name: "[vdso]", path: "[vdso]", r: bytes.NewReader(buf), key: vdsoKey, refs: 1}
	s.modules[vdsoKey] = m
	return m
}

// release drops a process's references to its modules. s.mu is held.
func (s *Symbolizer) release(p *process) {
	for _, mp := range p.mappings {
		if mp.mod == nil {
			continue
		}
		mp.mod.refs--
		if mp.mod.refs == 0 {
			delete(s.modules, mp.mod.key)
			mp.mod.close()
		}
	}
}

// evict drops processes not captured within Retain, and the least recently
// captured beyond MaxProcesses. s.mu is held.
func (s *Symbolizer) evict(now time.Time) {
	for pid, p := range s.procs {
		if now.Sub(p.captured) > s.cfg.Retain {
			s.release(p)
			delete(s.procs, pid)
		}
	}
	for len(s.procs) > s.cfg.MaxProcesses {
		var oldest *process
		for _, p := range s.procs {
			if oldest == nil || p.captured.Before(oldest.captured) {
				oldest = p
			}
		}
		s.release(oldest)
		delete(s.procs, oldest.pid)
	}
}

// User symbolizes a user stack of process pid, innermost frame first, as
// bpf_get_stack(BPF_F_USER_STACK) returns it. It returns a frame per
// address, preceded by a frame (Inlined set) for each call the compiler
// inlined there (Go binaries): an address it cannot name keeps its module
// and offset, or just its address. The error says why the whole stack could not be symbolized
// (the process was never captured and is gone); frames are returned anyway.
//
// Every frame but the first is a return address, so it is looked up one
// byte earlier, inside the call instruction: that names the calling line,
// and the right function when the call was a function's last instruction.
func (s *Symbolizer) User(pid uint32, addrs []uint64) ([]snapshot.Frame, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return addrFrames(addrs), ErrClosed
	}
	p := s.procs[pid]
	if p == nil {
		s.mu.Unlock()
		err := s.Capture(pid)
		s.mu.Lock()
		if err != nil {
			if frames, am := s.fromAnchors(addrs); am != nil {
				s.noteUnnamed(am.mod)
				return frames, fmt.Errorf("symbolize user stack: %w (process %d): frames in %s are named from the binary the probe is in, frames elsewhere keep their addresses",
					errExitedAnchored, pid, am.mod.name)
			}
			return addrFrames(addrs), fmt.Errorf("symbolize user stack: process %d was not captured before it exited: %w", pid, err)
		}
		if p = s.procs[pid]; p == nil {
			return addrFrames(addrs), fmt.Errorf("symbolize user stack: process %d is no longer cached", pid)
		}
	}
	// Room for a few inlined calls, so that one allocation is the rule.
	frames := make([]snapshot.Frame, 0, len(addrs)+8)
	retried := false
	for i, a := range addrs {
		pc := a
		if i > 0 && pc > 0 {
			pc--
		}
		f := snapshot.Frame{Addr: a}
		found, inlined := s.symbolizeUser(p, &f, pc)
		if !found && !retried && s.refreshable(p) {
			// A library loaded or code generated after the capture: read
			// the maps again, once per stack.
			retried = true
			if p = s.recapture(p); p != nil {
				f = snapshot.Frame{Addr: a}
				_, inlined = s.symbolizeUser(p, &f, pc)
			}
		}
		// Inlined calls first, innermost first, at the same address.
		for _, r := range inlined {
			g := f
			g.Function, g.File, g.Line, g.Inlined = r.fn, r.file, r.line, true
			frames = append(frames, g)
		}
		frames = append(frames, f)
	}
	return frames, nil
}

// addrFrames returns a frame per address, holding only the address.
func addrFrames(addrs []uint64) []snapshot.Frame {
	frames := make([]snapshot.Frame, len(addrs))
	for i, a := range addrs {
		frames[i].Addr = a
	}
	return frames
}

// symbolizeUser fills f for pc and returns the calls inlined there, if
// any; found reports whether pc fell in a mapping or a perf map entry.
func (s *Symbolizer) symbolizeUser(p *process, f *snapshot.Frame, pc uint64) (found bool, inlined []result) {
	i := sort.Search(len(p.mappings), func(i int) bool { return p.mappings[i].start > pc }) - 1
	if i >= 0 && pc < p.mappings[i].end {
		mp := &p.mappings[i]
		f.Module = mp.name
		off := f.Addr - mp.start + mp.offset // the frame's own address, not pc
		f.Offset = off
		if mp.mod != nil {
			if err := mp.mod.load(); err != nil {
				// Not ELF: JIT code in a memfd (W^X double mapping)
				// may still be in the perf map.
				s.log.Debug("module_unparsable", "path", mp.mod.path, "error", err)
				s.perfLookup(p, f, pc)
				return true, nil
			}
			f.BuildID = mp.mod.buildID
			s.noteUnnamed(mp.mod)
			if a, ok := mp.mod.fileOffsetToAddr(off); ok {
				f.Offset = a
			}
			if a, ok := mp.mod.fileOffsetToAddr(pc - mp.start + mp.offset); ok {
				res := mp.mod.lookup(a)
				last := res[len(res)-1]
				f.Function, f.File, f.Line = last.fn, last.file, last.line
				inlined = res[:len(res)-1]
				if len(inlined) == 0 {
					inlined = nil
				}
			}
			return true, inlined
		}
		// Anonymous executable memory is JIT code: a miss may mean the
		// JIT wrote its perf map after the capture.
		return s.perfLookup(p, f, pc) || mp.name != "[anon]", nil
	}
	return s.perfLookup(p, f, pc), nil
}

func (s *Symbolizer) perfLookup(p *process, f *snapshot.Frame, pc uint64) bool {
	if p.perf == nil {
		return false
	}
	e, ok := p.perf.lookup(pc)
	if !ok {
		return false
	}
	f.Function = e.name
	if f.Module == "" || f.Module == "[anon]" {
		f.Module = filepath.Base(p.perfPath)
		f.Offset = f.Addr - e.start
	}
	return true
}

// refreshable reports whether p may be re-read after a miss: the process
// is alive and was not re-read in the last second.
func (s *Symbolizer) refreshable(p *process) bool {
	return time.Since(p.refresh) > time.Second
}

// recapture re-reads a live process's maps and perf map after a lookup
// missed. It returns the process to use. s.mu is held.
func (s *Symbolizer) recapture(p *process) *process {
	p.refresh = time.Now()
	key, err := readProcKey(s.cfg.ProcRoot, p.pid)
	if err != nil || key != p.key {
		// Gone, or a new image: what was captured is all there is.
		return p
	}
	np, err := s.capture(p.pid, key)
	if err != nil {
		return p
	}
	np.captured, np.refresh = p.captured, p.refresh
	s.release(p)
	s.procs[p.pid] = np
	return np
}

// Kernel symbolizes a kernel stack with /proc/kallsyms, read on first use
// and again (at most once a minute) when an address misses. Module is
// "kernel" or the kernel module's name; Offset is the address's offset from
// the function's start, as the kernel prints it (func+0x1a). When kallsyms
// hides its addresses (kernel.kptr_restrict without CAP_SYSLOG), the error
// wraps ErrKernelHidden and the frames keep only their addresses.
func (s *Symbolizer) Kernel(addrs []uint64) ([]snapshot.Frame, error) {
	frames := make([]snapshot.Frame, len(addrs))
	for i, a := range addrs {
		frames[i].Addr = a
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return frames, ErrClosed
	}
	if s.kernel == nil && (s.kerr == nil || time.Since(s.kread) > time.Minute) {
		s.loadKernel()
	}
	if s.kernel == nil {
		return frames, fmt.Errorf("symbolize kernel stack: %w", s.kerr)
	}
	for i := range frames {
		pc := addrs[i]
		sym, ok := s.kernel.lookup(pc)
		if !ok && time.Since(s.kread) > time.Minute {
			s.loadKernel()
			if s.kernel == nil {
				return frames, fmt.Errorf("symbolize kernel stack: %w", s.kerr)
			}
			sym, ok = s.kernel.lookup(pc)
		}
		if !ok {
			continue
		}
		frames[i].Function = sym.name
		frames[i].Module = s.kernel.moduleName(sym)
		frames[i].Offset = pc - sym.addr
	}
	return frames, nil
}

func (s *Symbolizer) loadKernel() {
	s.kread = time.Now()
	k, err := readKallsyms(s.cfg.Kallsyms)
	if err != nil {
		s.kernel, s.kerr = nil, err
		return
	}
	s.kernel, s.kerr = k, nil
}

// Close closes every open file. Later calls return ErrClosed; Close itself
// may be called again.
func (s *Symbolizer) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil
	}
	s.closed = true
	var errs []error
	for _, m := range s.modules {
		if err := m.close(); err != nil {
			errs = append(errs, err)
		}
	}
	for _, am := range s.anchors {
		if err := am.mod.close(); err != nil {
			errs = append(errs, err)
		}
	}
	s.modules, s.procs, s.kernel, s.anchors = nil, nil, nil, nil
	return errors.Join(errs...)
}
