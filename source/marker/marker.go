package marker

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"

	"github.com/spanwatch/spanwatch/internal/markerabi"
	"github.com/spanwatch/spanwatch/internal/symbolize"
	"github.com/spanwatch/spanwatch/internal/userfile"
	"github.com/spanwatch/spanwatch/source"
)

// The span SDK's marker function and enable word (emit/probe.go).
const (
	markerSymbol = "github.com/spanwatch/spanwatch/emit.marker.abi0"
	probeSymbol  = "github.com/spanwatch/spanwatch/emit.probe"
)

// libspanwatchName is what the file name of a shared object must contain
// for the scan to look for libspanwatch's marker in it (libspanwatch.so,
// the SDKs' native parts): reading every library of every process at each
// scan would cost more than the rest of the scan together. Executables are
// all checked, by /proc/PID/exe.
const libspanwatchName = "spanwatch"

// mapsMax caps the bytes of /proc/PID/maps read per process.
const mapsMax = 4 << 20

// fileKey identifies a binary on disk, whatever path or namespace it is seen
// through.
type fileKey struct {
	dev, ino uint64
	mtime    int64
	size     int64
}

type markerBinary struct {
	path string    // where it was first seen
	link link.Link // nil: checked, no marker (or one that could not be read)
	// missed counts the scans in a row that found no process running
	// the binary; at ReleaseScans it is let go.
	missed int
}

// ReleaseScans is how many scans in a row must find no process
// running a binary before its uprobe and its entry are released
// (source.ReleaseScans).
const ReleaseScans = source.ReleaseScans

// A Source uprobes the span SDK's marker in every binary that has it: the
// Go SDK's (emit) and libspanwatch's (include/spanwatch.h), found by a scan
// of /proc every Config.ScanInterval and in the binaries the
// configuration names. A uprobe is per file, so one attachment serves
// every process running it. A binary is let go (its uprobe link closed,
// the symbolizer's copy of it closed, its entry forgotten) once no process
// runs it any more, or once the file was replaced: entries are keyed by
// the file's identity (device, inode, size and modification time), not its
// path, so the map holds the binaries running now, not every binary ever
// seen.
//
// Its programs are the core object's own (source.Programs: compiled with
// the aggregation, inlined in it, and loaded with the core); the source
// owns finding the binaries and attaching them.
type Source struct {
	prog     *ebpf.Program // the Go SDK's marker (ABI0: the event on the stack)
	progSysV *ebpf.Program // libspanwatch's marker (System V: the event in %rdi, or x0 on arm64)
	multi    bool          // the programs are loaded for uprobe_multi links
	// nop5 is set where the kernel optimizes uprobes on five-byte nops
	// (the uprobe syscall, x86-64, Linux 6.18+): the Go SDK's marker is
	// then attached at its five-byte nop, a call and a syscall per span
	// instead of a trap. libspanwatch's marker keeps its one-byte nop:
	// the call writes below the stack pointer, into the red zone C code
	// may keep data in (emit's TestNop5RedZone).
	nop5     bool
	core     *source.Core
	log      *slog.Logger
	procRoot string

	binariesCfg  []string
	scanInterval time.Duration

	// attachMu is held across a whole check-and-attach (and a scan), so
	// no binary is attached twice: two callers of AttachPath for one
	// binary, or a scan racing Scan, find one link.
	attachMu sync.Mutex
	closed   bool                      // under attachMu: Close ran, nothing is attached any more
	mu       sync.Mutex                // guards binaries, for Binaries() during an attach
	binaries map[fileKey]*markerBinary // link nil: checked, no marker

	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// Config configures the marker source.
type Config struct {
	// Binaries are binaries to uprobe the marker in, besides those found
	// by scanning /proc: they are watched whether or not a process runs
	// them, and attached anew when replaced.
	Binaries []string
	// ScanInterval is how often /proc is scanned for new binaries with
	// the marker; 0 or less: only when Scan is called.
	ScanInterval time.Duration
}

// ErrClosed is returned by AttachPath after Close.
var ErrClosed = errors.New("marker source closed")

// Attach uprobes the marker in the configured binaries (an error names
// the one that failed), then scans /proc once and, with a ScanInterval,
// every interval until Close.
func Attach(core *source.Core, cfg Config) (_ *Source, err error) {
	p := core.Programs
	if p.Marker == nil || p.MarkerSysV == nil {
		return nil, errors.New("marker source: the core object has no marker programs")
	}
	m := &Source{prog: p.Marker, progSysV: p.MarkerSysV, multi: p.UprobeMulti, nop5: haveUprobeSyscall(), core: core, log: core.Logger,
		procRoot: core.ProcRoot, binariesCfg: cfg.Binaries, scanInterval: cfg.ScanInterval, binaries: map[fileKey]*markerBinary{}}
	if m.log == nil {
		m.log = slog.New(slog.DiscardHandler)
	}
	m.log.Info("marker_uprobes", "method", m.Method(), "go_site", m.goSite())
	for _, b := range cfg.Binaries {
		if err := m.AttachPath(b); err != nil {
			m.Close()
			return nil, fmt.Errorf("marker source: %w", err)
		}
	}
	if cfg.ScanInterval > 0 {
		m.Scan()
		ctx, cancel := context.WithCancel(context.Background())
		m.cancel = cancel
		m.wg.Add(1)
		go func() { defer m.wg.Done(); source.Every(ctx, m.scanInterval, m.Scan) }()
	}
	return m, nil
}

// Kind is "marker".
func (m *Source) Kind() string { return "marker" }

// Counts returns nil: the marker's spans are counted in the core's own
// counters.
func (m *Source) Counts() (map[string]uint64, error) { return nil, nil }

// Method names how the marker's uprobes are attached: "uprobe_multi" (a
// BPF link) or "perf" (the perf_uprobe PMU).
func (m *Source) Method() string {
	if m.multi {
		return "uprobe_multi"
	}
	return "perf"
}

// goSite names where the Go SDK's marker is attached: "nop5" where the
// kernel optimizes uprobes on five-byte nops (binaries built before the
// marker had one still get "nop"), "nop" otherwise.
func (m *Source) goSite() string {
	if m.nop5 {
		return "nop5"
	}
	return "nop"
}

// Scan looks at every process's executable, and at the shared objects it
// maps whose name contains libspanwatchName, and attaches to new ones that
// contain a marker, then lets go of the binaries no process ran in the
// last ReleaseScans scans. Binaries given in Config.Binaries
// are kept while their file is there: they are watched whether or not a
// process runs them, and attached anew when replaced.
func (m *Source) Scan() {
	m.attachMu.Lock()
	defer m.attachMu.Unlock()
	if m.closed {
		return
	}
	procs, err := source.Processes(m.procRoot)
	if err != nil {
		// Nothing is released on a scan that could not look.
		m.log.Warn("proc_scan_failed", "error", err)
		return
	}
	seen := map[fileKey]bool{}
	for _, p := range procs {
		dir := p.Dir
		for _, bin := range append([]string{filepath.Join(dir, "exe")}, MappedLibraries(dir)...) {
			key, ok, err := m.attachLocked(bin, dir)
			if ok {
				seen[key] = true
			}
			if err != nil {
				m.log.Debug("marker_attach_failed", "exe", bin, "error", err)
			}
		}
	}
	for _, b := range m.binariesCfg {
		key, ok, err := m.attachLocked(b, "")
		if ok {
			seen[key] = true
		}
		if err != nil {
			m.log.Debug("marker_attach_failed", "exe", b, "error", err)
		}
	}
	m.release(seen)
}

// MappedLibraries returns a /proc/PID/map_files path for each shared
// object the process in procDir maps executable whose file name contains
// libspanwatchName: libspanwatch.so, or an SDK's native part with a copy
// of it inside.
func MappedLibraries(procDir string) []string {
	pid, _ := strconv.Atoi(filepath.Base(procDir))
	ctx, cancel := context.WithTimeout(context.Background(), Timeout)
	defer cancel()
	b, err := userfile.ReadProc(ctx, userfile.OnPID(filepath.Dir(procDir), pid), filepath.Join(procDir, "maps"), mapsMax)
	if err != nil || !bytes.Contains(b, []byte(libspanwatchName)) {
		return nil
	}
	var out []string
	seen := map[string]bool{}
	for len(b) > 0 {
		line := b
		if i := bytes.IndexByte(b, '\n'); i >= 0 {
			line, b = b[:i], b[i+1:]
		} else {
			b = nil
		}
		// START-END PERMS OFFSET DEV INODE PATH
		f := strings.Fields(string(line))
		if len(f) < 6 || len(f[1]) < 3 || f[1][2] != 'x' || !strings.HasPrefix(f[5], "/") {
			continue
		}
		path := strings.Join(f[5:], " ")
		if !strings.Contains(filepath.Base(path), libspanwatchName) || seen[f[3]+" "+f[4]] {
			continue
		}
		seen[f[3]+" "+f[4]] = true
		out = append(out, filepath.Join(procDir, "map_files", f[0]))
	}
	return out
}

// release lets go of the binaries not in seen for ReleaseScans scans
// in a row. m.attachMu is held.
func (m *Source) release(seen map[fileKey]bool) {
	m.mu.Lock()
	var gone []*markerBinary
	var goneKeys []fileKey
	for k, b := range m.binaries {
		if seen[k] {
			b.missed = 0
			continue
		}
		if b.missed++; b.missed < ReleaseScans {
			continue
		}
		delete(m.binaries, k)
		gone = append(gone, b)
		goneKeys = append(goneKeys, k)
	}
	// The symbolizer keys its copy by device and inode only: a file
	// rewritten in place is one copy for its old and its new entry.
	inode := map[[2]uint64]bool{}
	for k, b := range m.binaries {
		if b.link != nil {
			inode[[2]uint64{k.dev, k.ino}] = true
		}
	}
	m.mu.Unlock()
	for i, b := range gone {
		if b.link == nil {
			continue
		}
		if err := b.link.Close(); err != nil {
			m.log.Warn("marker_detach_failed", "binary", b.path, "error", err)
		}
		if k := goneKeys[i]; !inode[[2]uint64{k.dev, k.ino}] {
			if m.core.RemoveAnchor != nil {
				m.core.RemoveAnchor(k.dev, k.ino)
			}
		}
		m.log.Info("marker_released", "binary", b.path, "reason", "no process runs it")
	}
}

// AttachPath uprobes the marker in the binary at path, if it has one and is
// not attached yet. A binary without the marker is not an error.
func (m *Source) AttachPath(path string) error {
	m.attachMu.Lock()
	defer m.attachMu.Unlock()
	if m.closed {
		return ErrClosed
	}
	_, _, err := m.attachLocked(path, "")
	return err
}

// AttachFile checks and attaches one file a process runs or maps, as a
// scan does: procDir is the process's /proc/PID directory (the symbolizer
// reads the binary through its root, with its credentials). A file without
// the marker is remembered and not an error.
func (m *Source) AttachFile(path, procDir string) error {
	m.attachMu.Lock()
	defer m.attachMu.Unlock()
	if m.closed {
		return ErrClosed
	}
	_, _, err := m.attachLocked(path, procDir)
	return err
}

// controlFd runs fn with the file's descriptor, held open meanwhile.
func controlFd(f *os.File, fn func(fd int)) error {
	rc, err := f.SyscallConn()
	if err != nil {
		return err
	}
	return rc.Control(func(fd uintptr) { fn(int(fd)) })
}

// Timeout bounds each step of checking and attaching one binary: a
// binary on a file system that does not answer (a FUSE daemon that
// stopped) is skipped and counted, and the scan goes on.
const Timeout = 2 * time.Second

// attachLocked is AttachPath with m.attachMu held. It returns the binary's
// identity, with ok true, when path names a regular file, whether or not
// it has the marker. procDir is the /proc directory of the process found
// running it ("" for a binary the configuration names). Stat, open, check
// and attach each run through userfile.Do on behalf of the directory the
// binary is in (readlink of /proc/PID/exe touches no file system): while
// a file there hangs (a FUSE daemon that stopped answering, a network
// file system), binaries elsewhere are checked as usual.
func (m *Source) attachLocked(path, procDir string) (key fileKey, ok bool, err error) {
	ctx, cancel := context.WithTimeout(context.Background(), Timeout)
	defer cancel()
	target, err := os.Readlink(path)
	if err != nil {
		target = path
	}
	on := "directory " + filepath.Dir(strings.TrimSuffix(target, " (deleted)"))
	keyOf := func(i userfile.Info) fileKey {
		return fileKey{dev: i.Dev, ino: i.Ino, mtime: i.ModTime.UnixNano(), size: i.Size}
	}
	seen := func(k fileKey) bool {
		m.mu.Lock()
		defer m.mu.Unlock()
		_, ok := m.binaries[k]
		return ok
	}
	info, err := userfile.StatPath(ctx, path, on)
	if errors.Is(err, userfile.ErrNotRegular) {
		return fileKey{}, false, nil
	}
	if err != nil {
		return fileKey{}, false, err
	}
	if key = keyOf(info); seen(key) {
		return key, true, nil
	}
	f, err := userfile.OpenPath(ctx, path, userfile.Options{On: on})
	if errors.Is(err, userfile.ErrNotRegular) {
		return fileKey{}, false, nil
	}
	if err != nil {
		return fileKey{}, false, err
	}
	defer f.Close()
	if key = keyOf(f.Info); seen(key) {
		return key, true, nil
	}
	found, err := userfile.Do(ctx, on, func() (Found, error) { return Find(f) }, nil)
	if err != nil {
		if errors.Is(err, userfile.ErrTimeout) || errors.Is(err, userfile.ErrBusy) {
			// Not remembered: tried again at the next scan.
			return key, true, fmt.Errorf("check %s: %w", path, err)
		}
		m.mu.Lock()
		m.binaries[key] = &markerBinary{path: path}
		m.mu.Unlock()
		if errors.Is(err, ErrNoMarker) {
			return key, true, nil
		}
		return key, true, err
	}
	if len(found.Caps) > 0 {
		m.log.Warn("marker_binary_capped", "binary", path, "caps", strings.Join(found.Caps, ","),
			"hint", "parts of this binary past the caps were not read; the marker was found in the rest")
	}
	// The Go SDK's marker is attached at its five-byte nop where the
	// kernel optimizes it, and at its first byte otherwise; the stack
	// anchor is the site the uprobe fires at.
	site, off, addr := "nop", found.Off, found.Addr
	if found.Nop5 && m.nop5 {
		site, off, addr = "nop5", off+markerabi.GoNop5Offset, addr+markerabi.GoNop5Offset
	}
	// The uprobe names the file by the descriptor already open: the
	// kernel takes that very inode, with no path to look up again. Its
	// registration reads the probed page, which a file system that
	// stopped answering would never give: the attach is bounded too, and
	// a link made after the caller gave up is closed.
	// The attach takes a descriptor of its own (dup'd through the
	// os.File, which fails once the caller closed it), closed when the
	// attach ends: the caller closes its own when it gives up, and a
	// number reused meanwhile must not name another file.
	l, err := userfile.Do(ctx, on, func() (link.Link, error) {
		dup := -1
		var derr error
		if err := controlFd(f.File, func(fd int) { dup, derr = unix.Dup(fd) }); err != nil || derr != nil {
			return nil, fmt.Errorf("open %s: %w", path, errors.Join(err, derr))
		}
		defer unix.Close(dup)
		ex, err := link.OpenExecutable(fmt.Sprintf("/proc/self/fd/%d", dup))
		if err != nil {
			return nil, fmt.Errorf("open %s: %w", path, err)
		}
		prog := m.prog
		if found.SysV {
			prog = m.progSysV
		}
		if m.multi {
			return ex.UprobeMulti(nil, prog, &link.UprobeMultiOptions{Addresses: []uint64{off}, RefCtrOffsets: []uint64{found.Sem}})
		}
		return ex.Uprobe("", prog, &link.UprobeOptions{Address: off, RefCtrOffset: found.Sem})
	}, func(l link.Link) { l.Close() })
	if err != nil {
		if !m.multi && errors.Is(err, os.ErrPermission) {
			return key, true, fmt.Errorf("uprobe %s in %s: the perf_uprobe PMU needs CAP_SYS_ADMIN (kernels before 6.6, or NoUprobeMulti): %w", found.symbol(), path, err)
		}
		return key, true, fmt.Errorf("uprobe %s in %s (%s): %w", found.symbol(), path, m.Method(), err)
	}
	real, _ := os.Readlink(path)
	if real == "" {
		real = path
	}
	// Stacks of processes that exit before their maps are read are
	// named from the binary: the marker's address gives the load bias.
	// The binary is read for them only if its process could read it.
	var cred *userfile.Cred
	var root string
	if procDir != "" {
		root = filepath.Join(procDir, "root")
		if b, err := userfile.ReadProc(ctx, "", filepath.Join(procDir, "status"), 64<<10); err == nil {
			if c, err := userfile.ParseStatus(b); err == nil {
				cred = &c
			}
		}
	}
	if m.core.AddAnchor != nil {
		m.core.AddAnchor(symbolize.Anchor{Path: real, Open: path, Addr: addr, Reader: cred, Root: root})
	}
	m.mu.Lock()
	m.binaries[key] = &markerBinary{path: real, link: l}
	m.mu.Unlock()
	m.log.Info("marker_attached", "binary", real, "marker", found.symbol(), "site", site, "offset", off, "semaphore", found.Sem, "method", m.Method())
	return key, true, nil
}

// Binaries returns the binaries whose marker is uprobed, sorted.
func (m *Source) Binaries() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []string
	for _, b := range m.binaries {
		if b.link != nil {
			out = append(out, b.path)
		}
	}
	sort.Strings(out)
	return out
}

// Entries returns how many binaries the source remembers, with or without
// the marker.
func (m *Source) Entries() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.binaries)
}

// Links returns how many binaries have the marker's uprobe attached.
func (m *Source) Links() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	n := 0
	for _, b := range m.binaries {
		if b.link != nil {
			n++
		}
	}
	return n
}

// Close stops the scans and detaches every uprobe. It is idempotent.
func (m *Source) Close() error {
	if m.cancel != nil {
		m.cancel()
		m.wg.Wait()
	}
	m.attachMu.Lock()
	defer m.attachMu.Unlock()
	m.closed = true
	m.mu.Lock()
	defer m.mu.Unlock()
	for k, b := range m.binaries {
		if b.link != nil {
			b.link.Close()
		}
		delete(m.binaries, k)
	}
	return nil
}
