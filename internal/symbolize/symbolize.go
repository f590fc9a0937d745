package symbolize

import (
	"bytes"
	"context"
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
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/spanwatch/spanwatch/internal/userfile"
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
	// Timeout bounds each wait on a process's files and /proc: opening a
	// file of a process (a FUSE or network file that does not answer),
	// reading its maps (behind its mmap lock); a file's tables, parsed on
	// first use, are waited for five times as long (a big binary's first
	// parse takes seconds). What does not finish in time is skipped,
	// counted (userfile.ReasonTimeout) and not waited for again by later
	// calls while it hangs. 2s when zero.
	Timeout time.Duration
	// Limits bound what is read of each file and kept of all of them.
	Limits Limits
}

// A Symbolizer turns user and kernel stack addresses into frames. It is
// safe for concurrent use. It holds its lock only to look up and update
// its maps of processes and files: every open and read of a user's file
// happens outside it, bounded by Config.Timeout.
type Symbolizer struct {
	cfg Config
	lim Limits
	log *slog.Logger

	// base ends with Close: every wait and load stops then.
	base   context.Context
	cancel context.CancelFunc
	// memory is what all files' tables and perf maps take (Limits.Memory).
	memory atomic.Int64

	mu      sync.Mutex
	procs   map[uint32]*process
	modules map[fileKey]*module
	closed  bool
	// anchors are traced binaries with their probe sites (AddAnchor).
	anchors map[fileKey]*anchorMod
	// unnamed explains, by build id, the binaries without symbols seen.
	unnamed map[string]string

	kmu    sync.Mutex // guards the kernel's symbols
	kernel *kallsyms
	kerr   error
	kread  time.Time

	noMapFiles bool // tests: open through /proc/PID/root only
}

// fileKey identifies a mapped file the way /proc/PID/maps does.
type fileKey struct{ dev, inode uint64 }

// A process is what Capture saw of one exec of one process. Its mappings
// and perf map do not change once it is in the Symbolizer's map.
type process struct {
	pid      uint32
	key      procKey
	mappings []mapping // executable regions by start address
	perf     *perfMap  // nil when the process has none
	perfPath string
	captured time.Time    // under Symbolizer.mu
	refresh  atomic.Int64 // unix nanoseconds of the last re-read of maps after a miss
}

type mapping struct {
	start, end, offset uint64
	name               string  // Frame.Module
	mod                *module // nil for anonymous or unreadable regions
	// unreadable says why a file's mapping has no module (the file
	// could not be opened), for User's error.
	unreadable error
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
	if cfg.Timeout <= 0 {
		cfg.Timeout = 2 * time.Second
	}
	base, cancel := context.WithCancel(context.Background())
	return &Symbolizer{
		cfg:     cfg,
		lim:     cfg.Limits.withDefaults(),
		log:     cfg.Logger,
		base:    base,
		cancel:  cancel,
		procs:   map[uint32]*process{},
		modules: map[fileKey]*module{},
	}
}

// ErrClosed is returned by Capture, User and Kernel after Close.
var ErrClosed = errors.New("symbolizer closed")

// Memory returns the bytes the symbolizer's tables, perf maps and lookup
// caches take on the heap now (what Limits.Memory bounds).
func (s *Symbolizer) Memory() int64 { return s.memory.Load() }

// op returns the context one Capture or User call waits with.
func (s *Symbolizer) op() (context.Context, context.CancelFunc) {
	return context.WithTimeout(s.base, s.cfg.Timeout)
}

// Capture records the memory map of process pid and opens the files mapped
// executable in it (through /proc/PID/map_files, which reaches into
// containers and deleted files, else /proc/PID/root), so that its stacks
// symbolize even after it exits. Call it as soon as a record for pid
// arrives. It is cheap when nothing changed: one read of /proc/PID/stat
// tells whether the process exec'd since its last capture.
func (s *Symbolizer) Capture(pid uint32) error {
	ctx, cancel := s.op()
	defer cancel()
	return s.captureCtx(ctx, pid)
}

func (s *Symbolizer) captureCtx(ctx context.Context, pid uint32) error {
	key, err := readProcKey(s.cfg.ProcRoot, pid)
	if err != nil {
		return fmt.Errorf("capture process %d: %w", pid, err)
	}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return ErrClosed
	}
	if p := s.procs[pid]; p != nil && p.key == key {
		p.captured = time.Now()
		s.mu.Unlock()
		return nil
	}
	s.mu.Unlock()
	p, err := s.capture(ctx, pid, key, nil)
	if err != nil {
		return fmt.Errorf("capture process %d: %w", pid, err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		s.release(p)
		return ErrClosed
	}
	now := time.Now()
	p.captured = now
	if old := s.procs[pid]; old != nil {
		s.release(old)
	}
	s.procs[pid] = p
	s.evict(now)
	return nil
}

// maxMapsBytes bounds what is read of one /proc/PID/maps (a process with
// a million mappings); the regions past it are not captured.
const maxMapsBytes = 32 << 20

// capture reads the process's credentials, maps and perf map and opens
// its modules, without the lock: every read is bounded by ctx. prev is the
// same process captured before (a capture again after a miss): its perf
// map is kept when the file did not change.
func (s *Symbolizer) capture(ctx context.Context, pid uint32, key procKey, prev *process) (*process, error) {
	dir := filepath.Join(s.cfg.ProcRoot, strconv.FormatUint(uint64(pid), 10))
	status, err := userfile.ReadProc(ctx, "", filepath.Join(dir, "status"), 64<<10)
	if err != nil {
		return nil, err
	}
	cred, err := userfile.ParseStatus(status)
	if err != nil {
		return nil, err
	}
	on := userfile.OnUID(cred.UID[1])
	b, err := userfile.ReadProc(ctx, on, filepath.Join(dir, "maps"), maxMapsBytes)
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
			m.mod, m.unreadable = s.openModule(ctx, dir, r, &cred)
		} else if r.path == "[vdso]" {
			m.mod = s.vdsoModule(ctx, dir, r, on)
		} else if r.path == "" {
			m.name = "[anon]"
		}
		p.mappings = append(p.mappings, m)
	}
	sort.Slice(p.mappings, func(i, j int) bool { return p.mappings[i].start < p.mappings[j].start })
	s.readPerfMap(ctx, p, dir, status, &cred, prev)
	return p, nil
}

// readPerfMap looks for the process's perf map inside its own root (a
// container's /tmp), named after its PID in its own namespace, then on the
// host under its host PID, as perf(1) does. A map is read only when it is
// a regular file (no link), belongs to the process's user or root, and the
// process could read it itself; it is read up to Limits.PerfMap.
func (s *Symbolizer) readPerfMap(ctx context.Context, p *process, dir string, status []byte, cred *userfile.Cred, prev *process) {
	nspid := parseNSPid(status, p.pid)
	type place struct{ root, name string }
	candidates := []place{{filepath.Join(dir, "root"), fmt.Sprintf("/tmp/perf-%d.map", nspid)}}
	if nspid != p.pid {
		candidates = append(candidates, place{"/", fmt.Sprintf("/tmp/perf-%d.map", p.pid)})
	}
	opts := userfile.Options{Owners: cred.Owners(), Reader: cred, On: userfile.OnUID(cred.UID[1])}
	for _, c := range candidates {
		var unchanged func(userfile.Info) bool
		if prev != nil && prev.perf != nil && prev.perfPath == c.name {
			unchanged = prev.perf.same
		}
		b, truncated, info, err := userfile.ReadFileChanged(ctx, c.root, c.name, opts, s.lim.PerfMap, unchanged)
		if err != nil {
			if !errors.Is(err, os.ErrNotExist) {
				s.log.Debug("perf_map_unreadable", "pid", p.pid, "path", filepath.Join(c.root, c.name), "error", err)
			}
			continue
		}
		if b == nil && unchanged != nil {
			// Read at the last capture and unchanged since: a miss
			// re-reads the maps, not a JIT's whole perf map.
			p.perf, p.perfPath = prev.perf.hold(), c.name
			return
		}
		bud := newBudget(s.lim.Memory, &s.memory, s.lim.Memory)
		p.perf, p.perfPath = parsePerfMap(b, truncated, bud), c.name
		p.perf.info = info
		if caps := bud.caps(); len(caps) > 0 && prev == nil {
			s.log.Warn("symbolize_file_capped", "path", filepath.Join(c.root, c.name), "caps", strings.Join(caps, ","),
				"hint", "entries past the cap are not read (symbolize.Limits.PerfMap)")
		}
		return
	}
}

// openModule returns the shared module for a mapped file, opening it on
// first sight, outside the lock. It returns nil when the file cannot be
// opened or is refused.
func (s *Symbolizer) openModule(ctx context.Context, dir string, r mapRegion, cred *userfile.Cred) (*module, error) {
	k := fileKey{dev: r.dev, inode: r.inode}
	s.mu.Lock()
	if m := s.modules[k]; m != nil {
		m.refs++
		s.mu.Unlock()
		return m, nil
	}
	s.mu.Unlock()
	// map_files names the exact mapped file, even when deleted or in
	// another mount namespace; it needs CAP_SYS_ADMIN or
	// CAP_CHECKPOINT_RESTORE. The path under /proc/PID/root may name a
	// different file if it was replaced, so the inode is checked there.
	// Either way the file must be a regular file the process could read.
	opts := userfile.Options{Reader: cred, On: userfile.OnUID(cred.UID[1])}
	root := filepath.Join(dir, "root")
	var f *userfile.File
	err := os.ErrPermission
	if !s.noMapFiles {
		f, err = userfile.OpenPath(ctx, filepath.Join(dir, "map_files", fmt.Sprintf("%x-%x", r.start, r.end)), opts)
	}
	if err != nil && !errors.Is(err, userfile.ErrAccess) && !errors.Is(err, userfile.ErrNotRegular) && !errors.Is(err, userfile.ErrTimeout) && !errors.Is(err, userfile.ErrBusy) {
		f, err = userfile.Open(ctx, root, strings.TrimSuffix(r.path, " (deleted)"), opts)
		if err == nil && replaced(f.Info, r) {
			f.Close()
			err = fmt.Errorf("file was replaced since it was mapped")
		}
	}
	if err != nil {
		s.log.Debug("module_unreadable", "path", r.path, "error", err)
		return nil, err
	}
	m := newModule(s, f, r.path, k)
	m.debug = &debugPlace{root: root, path: r.path, reader: cred, on: opts.On}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		m.close()
		return nil, ErrClosed
	}
	if old := s.modules[k]; old != nil {
		// Opened meanwhile by another capture.
		m.close()
		old.refs++
		return old, nil
	}
	m.refs = 1
	s.modules[k] = m
	return m, nil
}

// replaced reports whether a file opened by path is not the file mapped at
// r. Maps shows the device and inode of the file the kernel mapped, which
// for overlayfs (container images) is the layer's file, while fstat
// through the overlay may show the overlay's device: the inodes are
// compared only when the devices agree, as a different device says
// nothing either way.
func replaced(st userfile.Info, r mapRegion) bool {
	dev := uint64(unix.Major(st.Dev))<<32 | uint64(unix.Minor(st.Dev))
	return dev == r.dev && st.Ino != r.inode
}

// vdsoKey stands for the vDSO, which the kernel maps into every process:
// one image per kernel, read once.
var vdsoKey = fileKey{dev: ^uint64(0)}

// vdsoModule reads the vDSO's ELF image from the process's memory (it is
// no file), so frames in clock_gettime and friends get names.
func (s *Symbolizer) vdsoModule(ctx context.Context, dir string, r mapRegion, on string) *module {
	s.mu.Lock()
	if m := s.modules[vdsoKey]; m != nil {
		m.refs++
		s.mu.Unlock()
		return m
	}
	s.mu.Unlock()
	if r.end-r.start > 1<<20 {
		return nil // a vDSO is a few pages
	}
	buf, err := userfile.ReadProcAt(ctx, on, filepath.Join(dir, "mem"), int64(r.start), int(r.end-r.start))
	if err != nil || len(buf) != int(r.end-r.start) {
		s.log.Debug("vdso_unreadable", "error", err)
		return nil
	}
	m := newMemModule(s, "[vdso]", bytes.NewReader(buf), vdsoKey)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil
	}
	if old := s.modules[vdsoKey]; old != nil {
		old.refs++
		return old
	}
	m.refs = 1
	s.modules[vdsoKey] = m
	return m
}

// release drops a process's references to its modules. s.mu is held.
func (s *Symbolizer) release(p *process) {
	for _, mp := range p.mappings {
		if mp.mod != nil {
			s.unref(mp.mod)
		}
	}
	if p.perf != nil {
		p.perf.free()
	}
}

// unref drops one hold on m (a process's mapping or an anchor) and closes
// it when none is left. s.mu is held.
func (s *Symbolizer) unref(m *module) error {
	m.refs--
	if m.refs > 0 {
		return nil
	}
	if s.modules[m.key] == m {
		delete(s.modules, m.key)
	}
	return m.close()
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
	if s.closed {
		s.mu.Unlock()
		return addrFrames(addrs), ErrClosed
	}
	p := s.procs[pid]
	s.mu.Unlock()
	if p == nil {
		// The capture has a timeout of its own: a perf map that hangs
		// until it ends must not leave the lookups none.
		cctx, ccancel := s.op()
		err := s.captureCtx(cctx, pid)
		ccancel()
		if err != nil {
			ctx, cancel := s.op()
			defer cancel()
			if frames, am := s.fromAnchors(ctx, addrs); am != nil {
				s.noteUnnamed(am.mod)
				return frames, fmt.Errorf("symbolize user stack: %w (process %d): frames in %s are named from the binary the probe is in, frames elsewhere keep their addresses",
					errExitedAnchored, pid, am.mod.name)
			}
			return addrFrames(addrs), fmt.Errorf("symbolize user stack: process %d was not captured before it exited: %w", pid, err)
		}
		s.mu.Lock()
		p = s.procs[pid]
		s.mu.Unlock()
		if p == nil {
			return addrFrames(addrs), fmt.Errorf("symbolize user stack: process %d is no longer cached", pid)
		}
	}
	// The lookups wait for files' tables within a timeout of their own
	// (a first parse of a big binary takes seconds).
	ctx, cancel := context.WithTimeout(s.base, loadWait*s.cfg.Timeout)
	defer cancel()
	// Room for a few inlined calls, so that one allocation is the rule.
	frames := make([]snapshot.Frame, 0, len(addrs)+8)
	retried := false
	var why error // why the first unnamed frame in a file has no name
	for i, a := range addrs {
		pc := a
		if i > 0 && pc > 0 {
			pc--
		}
		f := snapshot.Frame{Addr: a}
		found, inlined, miss := s.symbolizeUser(ctx, p, &f, pc)
		if !found && !retried && s.refreshable(p) {
			// A library loaded or code generated after the capture: read
			// the maps again, once per stack.
			retried = true
			cctx, ccancel := s.op()
			p = s.recapture(cctx, p)
			ccancel()
			if p != nil {
				f = snapshot.Frame{Addr: a}
				_, inlined, miss = s.symbolizeUser(ctx, p, &f, pc)
			}
		}
		if why == nil && miss != nil {
			why = fmt.Errorf("symbolize user stack: frames in %s have no names: %w", f.Module, miss)
		}
		// Inlined calls first, innermost first, at the same address.
		for _, r := range inlined {
			g := f
			g.Function, g.File, g.Line, g.Inlined = r.fn, r.file, r.line, true
			frames = append(frames, g)
		}
		frames = append(frames, f)
	}
	return frames, why
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
// any; found reports whether pc fell in a mapping or a perf map entry,
// miss why a frame in a file got no name when the file's symbols could not
// be read (not when the file has none for it).
func (s *Symbolizer) symbolizeUser(ctx context.Context, p *process, f *snapshot.Frame, pc uint64) (found bool, inlined []result, miss error) {
	i := sort.Search(len(p.mappings), func(i int) bool { return p.mappings[i].start > pc }) - 1
	if i >= 0 && pc < p.mappings[i].end {
		mp := &p.mappings[i]
		f.Module = mp.name
		off := f.Addr - mp.start + mp.offset // the frame's own address, not pc
		f.Offset = off
		if mp.mod == nil {
			// Anonymous executable memory is JIT code: a miss may mean
			// the JIT wrote its perf map after the capture.
			found := s.perfLookup(p, f, pc)
			if !found && mp.unreadable != nil {
				miss = fmt.Errorf("the file could not be opened: %w", mp.unreadable)
			}
			return found || mp.name != "[anon]", nil, miss
		}
		var unnamed bool
		err := mp.mod.with(ctx, func(t *tables) {
			f.BuildID = t.buildID
			unnamed = t.noSymbols
			if a, ok := t.fileOffsetToAddr(off); ok {
				f.Offset = a
			}
			if a, ok := t.fileOffsetToAddr(pc - mp.start + mp.offset); ok {
				res := mp.mod.lookupLocked(a)
				last := res[len(res)-1]
				f.Function, f.File, f.Line = last.fn, last.file, last.line
				inlined = res[:len(res)-1]
				if len(inlined) == 0 {
					inlined = nil
				}
			}
		})
		switch {
		case errors.Is(err, errNotLoaded):
			s.log.Debug("module_not_loaded", "path", mp.mod.path)
			miss = fmt.Errorf("its symbols were still being read after %s", loadWait*s.cfg.Timeout)
		case err != nil:
			// Not ELF: JIT code in a memfd (W^X double mapping) may
			// still be in the perf map.
			s.perfLookup(p, f, pc)
		case unnamed:
			s.noteUnnamed(mp.mod)
		}
		return true, inlined, miss
	}
	return s.perfLookup(p, f, pc), nil, nil
}

func (s *Symbolizer) perfLookup(p *process, f *snapshot.Frame, pc uint64) bool {
	if p.perf == nil {
		return false
	}
	e, name, ok := p.perf.lookup(pc)
	if !ok {
		return false
	}
	f.Function = name
	if f.Module == "" || f.Module == "[anon]" {
		f.Module = filepath.Base(p.perfPath)
		f.Offset = f.Addr - e.start
	}
	return true
}

// refreshable reports whether p may be re-read after a miss: it was not
// re-read in the last second.
func (s *Symbolizer) refreshable(p *process) bool {
	return time.Since(time.Unix(0, p.refresh.Load())) > time.Second
}

// recapture re-reads a live process's maps and perf map after a lookup
// missed. It returns the process to use.
func (s *Symbolizer) recapture(ctx context.Context, p *process) *process {
	now := time.Now()
	p.refresh.Store(now.UnixNano())
	key, err := readProcKey(s.cfg.ProcRoot, p.pid)
	if err != nil || key != p.key {
		// Gone, or a new image: what was captured is all there is.
		return p
	}
	np, err := s.capture(ctx, p.pid, key, p)
	if err != nil {
		return p
	}
	np.refresh.Store(now.UnixNano())
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed || s.procs[p.pid] != p {
		// Closed, evicted or captured again meanwhile.
		s.release(np)
		return p
	}
	np.captured = p.captured
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
	closed := s.closed
	s.mu.Unlock()
	if closed {
		return frames, ErrClosed
	}
	s.kmu.Lock()
	defer s.kmu.Unlock()
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
	s.cancel()
	var errs []error
	for _, m := range s.modules {
		if err := m.close(); err != nil {
			errs = append(errs, err)
		}
	}
	for _, p := range s.procs {
		if p.perf != nil {
			p.perf.free()
		}
	}
	s.modules, s.procs, s.anchors = nil, nil, nil
	return errors.Join(errs...)
}
