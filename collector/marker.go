//go:build linux

package collector

import (
	"bytes"
	"context"
	"debug/elf"
	"debug/gosym"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"

	"github.com/spanwatch/spanwatch/internal/elfread"
	"github.com/spanwatch/spanwatch/internal/markerabi"
	"github.com/spanwatch/spanwatch/internal/symbolize"
	"github.com/spanwatch/spanwatch/internal/userfile"
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
	// the binary; at markerReleaseScans it is let go.
	missed int
}

// markerReleaseScans is how many scans in a row must find no process
// running a binary before its uprobe and its entry are released: two, so a
// binary whose process is replaced by another while /proc is being read
// (an exec, a restart) keeps its uprobe.
const markerReleaseScans = 2

// markerSource uprobes the span SDK's marker in every binary that has it.
// A uprobe is per file, so one attachment serves every process running it.
// A binary is let go (its uprobe link closed, the symbolizer's copy of it
// closed, its entry forgotten) once no process runs it any more, or once
// the file was replaced: entries are keyed by the file's identity (device,
// inode, size and modification time), not its path, so the map holds the
// binaries running now, not every binary ever seen.
type markerSource struct {
	prog     *ebpf.Program // the Go SDK's marker (ABI0: the event on the stack)
	progSysV *ebpf.Program // libspanwatch's marker (System V: the event in %rdi, or x0 on arm64)
	multi    bool          // the programs are loaded for uprobe_multi links
	cfg      Config

	// attachMu is held across a whole check-and-attach (and a scan), so
	// no binary is attached twice: two callers of attachPath for one
	// binary, or a scan racing ScanMarkers, find one link.
	attachMu sync.Mutex
	closed   bool                      // under attachMu: close ran, nothing is attached any more
	mu       sync.Mutex                // guards binaries, for attached() during an attach
	binaries map[fileKey]*markerBinary // link nil: checked, no marker
}

func newMarkerSource(prog, progSysV *ebpf.Program, multi bool, cfg Config) *markerSource {
	return &markerSource{prog: prog, progSysV: progSysV, multi: multi, cfg: cfg, binaries: map[fileKey]*markerBinary{}}
}

// method names how the marker's uprobes are attached.
func (m *markerSource) method() string {
	if m.multi {
		return "uprobe_multi"
	}
	return "perf"
}

func (m *markerSource) loop(ctx context.Context) {
	t := time.NewTicker(m.cfg.ScanInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			m.scan()
		}
	}
}

// scan looks at every process's executable, and at the shared objects it
// maps whose name contains libspanwatchName, and attaches to new ones that
// contain a marker, then lets go of the binaries no process ran in the
// last markerReleaseScans scans. Binaries given in Config.MarkerBinaries
// are kept while their file is there: they are watched whether or not a
// process runs them, and attached anew when replaced.
func (m *markerSource) scan() {
	m.attachMu.Lock()
	defer m.attachMu.Unlock()
	if m.closed {
		return
	}
	ents, err := os.ReadDir(m.cfg.ProcRoot)
	if err != nil {
		// Nothing is released on a scan that could not look.
		m.cfg.Logger.Warn("proc_scan_failed", "error", err)
		return
	}
	seen := map[fileKey]bool{}
	for _, e := range ents {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		dir := filepath.Join(m.cfg.ProcRoot, e.Name())
		for _, bin := range append([]string{filepath.Join(dir, "exe")}, mappedLibspanwatch(dir)...) {
			key, ok, err := m.attachLocked(bin, dir)
			if ok {
				seen[key] = true
			}
			if err != nil {
				m.cfg.Logger.Debug("marker_attach_failed", "exe", bin, "error", err)
			}
		}
	}
	for _, b := range m.cfg.MarkerBinaries {
		key, ok, err := m.attachLocked(b, "")
		if ok {
			seen[key] = true
		}
		if err != nil {
			m.cfg.Logger.Debug("marker_attach_failed", "exe", b, "error", err)
		}
	}
	m.release(seen)
}

// mappedLibspanwatch returns a /proc/PID/map_files path for each shared
// object the process in procDir maps executable whose file name contains
// libspanwatchName: libspanwatch.so, or an SDK's native part with a copy
// of it inside.
func mappedLibspanwatch(procDir string) []string {
	pid, _ := strconv.Atoi(filepath.Base(procDir))
	ctx, cancel := context.WithTimeout(context.Background(), markerTimeout)
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

// release lets go of the binaries not in seen for markerReleaseScans scans
// in a row. m.attachMu is held.
func (m *markerSource) release(seen map[fileKey]bool) {
	m.mu.Lock()
	var gone []*markerBinary
	var goneKeys []fileKey
	for k, b := range m.binaries {
		if seen[k] {
			b.missed = 0
			continue
		}
		if b.missed++; b.missed < markerReleaseScans {
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
			m.cfg.Logger.Warn("marker_detach_failed", "binary", b.path, "error", err)
		}
		if k := goneKeys[i]; !inode[[2]uint64{k.dev, k.ino}] {
			removeAnchor(m.cfg, k.dev, k.ino)
		}
		m.cfg.Logger.Info("marker_released", "binary", b.path, "reason", "no process runs it")
	}
}

// attachPath uprobes the marker in the binary at path, if it has one and is
// not attached yet. A binary without the marker is not an error.
func (m *markerSource) attachPath(path string) error {
	m.attachMu.Lock()
	defer m.attachMu.Unlock()
	if m.closed {
		return ErrClosed
	}
	_, _, err := m.attachLocked(path, "")
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

// markerTimeout bounds each step of checking and attaching one binary: a
// binary on a file system that does not answer (a FUSE daemon that
// stopped) is skipped and counted, and the scan goes on.
const markerTimeout = 2 * time.Second

// attachLocked is attachPath with m.attachMu held. It returns the binary's
// identity, with ok true, when path names a regular file, whether or not
// it has the marker. procDir is the /proc directory of the process found
// running it ("" for a binary the configuration names). Stat, open, check
// and attach each run through userfile.Do on behalf of the directory the
// binary is in (readlink of /proc/PID/exe touches no file system): while
// a file there hangs (a FUSE daemon that stopped answering, a network
// file system), binaries elsewhere are checked as usual.
func (m *markerSource) attachLocked(path, procDir string) (key fileKey, ok bool, err error) {
	ctx, cancel := context.WithTimeout(context.Background(), markerTimeout)
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
	found, err := userfile.Do(ctx, on, func() (marker, error) { return findMarker(f) }, nil)
	if err != nil {
		if errors.Is(err, userfile.ErrTimeout) || errors.Is(err, userfile.ErrBusy) {
			// Not remembered: tried again at the next scan.
			return key, true, fmt.Errorf("check %s: %w", path, err)
		}
		m.mu.Lock()
		m.binaries[key] = &markerBinary{path: path}
		m.mu.Unlock()
		if errors.Is(err, errNoMarker) {
			return key, true, nil
		}
		return key, true, err
	}
	if len(found.caps) > 0 {
		m.cfg.Logger.Warn("marker_binary_capped", "binary", path, "caps", strings.Join(found.caps, ","),
			"hint", "parts of this binary past the caps were not read; the marker was found in the rest")
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
		if found.sysv {
			prog = m.progSysV
		}
		if m.multi {
			return ex.UprobeMulti(nil, prog, &link.UprobeMultiOptions{Addresses: []uint64{found.off}, RefCtrOffsets: []uint64{found.sem}})
		}
		return ex.Uprobe("", prog, &link.UprobeOptions{Address: found.off, RefCtrOffset: found.sem})
	}, func(l link.Link) { l.Close() })
	if err != nil {
		if !m.multi && errors.Is(err, os.ErrPermission) {
			return key, true, fmt.Errorf("uprobe %s in %s: the perf_uprobe PMU needs CAP_SYS_ADMIN (kernels before 6.6, or NoUprobeMulti): %w", found.symbol(), path, err)
		}
		return key, true, fmt.Errorf("uprobe %s in %s (%s): %w", found.symbol(), path, m.method(), err)
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
	addAnchor(m.cfg, symbolize.Anchor{Path: real, Open: path, Addr: found.addr, Reader: cred, Root: root})
	m.mu.Lock()
	m.binaries[key] = &markerBinary{path: real, link: l}
	m.mu.Unlock()
	m.cfg.Logger.Info("marker_attached", "binary", real, "marker", found.symbol(), "offset", found.off, "semaphore", found.sem, "method", m.method())
	return key, true, nil
}

func (m *markerSource) attached() []string {
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

// entries returns how many binaries the source remembers, with or without
// the marker.
func (m *markerSource) entries() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.binaries)
}

func (m *markerSource) close() {
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
}

var errNoMarker = errors.New("no spanwatch marker")

// nativeMachine is the collector's own machine: libspanwatch's marker is
// attached only in binaries built for it, because uprobe_marker_sysv reads
// the first argument register of this machine's pt_regs (and a binary of
// another machine, run under an emulator, would get this machine's
// breakpoint written into its code).
var nativeMachine = map[string]elf.Machine{"amd64": elf.EM_X86_64, "arm64": elf.EM_AARCH64}[runtime.GOARCH]

// probeWordOffset and probeMagic are emit/probe.go's, from
// internal/markerabi: the enable word sits probeWordOffset bytes into
// emit.probe and is followed by the magic pair.
const (
	probeWordOffset = markerabi.WordOffset
	probeMagic      = markerabi.Magic
)

// Caps on what findMarker reads of a binary: the marker's symbols sit in
// the first megabytes of a symbol table, and the span SDK's binaries are
// Go programs with pclntabs of a few MiB.
const (
	markerMaxSection = 64 << 20 // bytes of a symbol table, string table or pclntab read
	markerMaxFuncs   = 1 << 20  // functions of a pclntab handed to debug/gosym
)

// marker is what findMarker found in a binary.
type marker struct {
	off, sem, addr uint64 // file offsets of the marker and the enable word; the marker's address
	sysv           bool   // libspanwatch's marker (the event in the first argument register), not the Go SDK's
	caps           []string
}

// symbol names the marker found, for messages.
func (mk marker) symbol() string {
	if mk.sysv {
		return markerabi.CMarkerSymbol
	}
	return markerSymbol
}

// findMarker returns the file offsets of the marker function and of the
// enable word (the uprobe's reference counter) in an ELF file: the Go
// SDK's, or else libspanwatch's (include/spanwatch.h). Binaries without a
// symbol table (go build -ldflags=-s, go test, strip) are searched through
// the Go pclntab and the enable word's magic. Every table is read within a
// cap (a binary any user can run is any file they made). A binary with
// both markers (a Go program that also includes spanwatch.h through cgo)
// is attached at the Go SDK's.
func findMarker(r io.ReaderAt) (marker, error) {
	f, err := elfread.NewFile(r)
	if err != nil {
		return marker{}, errNoMarker // not an ELF file: nothing to attach
	}
	var mk marker
	var probeAddr uint64
	mk.addr, probeAddr = markerBySymbols(f, &mk.caps)
	if mk.addr == 0 {
		mk.addr = markerByPclntab(f, &mk.caps)
	}
	if probeAddr == 0 && mk.addr != 0 {
		probeAddr = probeByMagic(f, probeMagic, &mk.caps)
	}
	if (mk.addr == 0 || probeAddr == 0) && f.Machine == nativeMachine {
		mk.addr, probeAddr = cMarker(f, &mk.caps)
		mk.sysv = true
	}
	if mk.addr == 0 || probeAddr == 0 {
		return marker{}, errNoMarker
	}
	if mk.off, err = fileOffset(f, mk.addr); err != nil {
		return marker{}, fmt.Errorf("%s: %w", mk.symbol(), err)
	}
	if mk.sem, err = fileOffset(f, probeAddr); err != nil {
		return marker{}, fmt.Errorf("%s: %w", probeSymbol, err)
	}
	return mk, nil
}

// cMarker finds libspanwatch's probe by its magic and, from the distance
// the probe holds, its marker: the marker must be in an executable segment
// and be what spanwatch.h makes, a nop then a return, so that a file that
// merely contains the magic gets no uprobe. It returns the marker's and
// the enable word's addresses, or zeros.
func cMarker(f *elf.File, caps *[]string) (markerAddr, probeAddr uint64) {
	code, ok := cMarkerCode[f.Machine]
	if !ok {
		return 0, 0 // the BPF objects are built for x86-64 and arm64 only
	}
	probeAddr = probeByMagic(f, markerabi.CMagic, caps)
	if probeAddr == 0 {
		return 0, 0
	}
	rec, ok := readAddr(f, probeAddr, markerabi.CABIOffset+4, 0)
	if !ok || binary.LittleEndian.Uint32(rec[markerabi.CABIOffset:]) != markerabi.CABISysV {
		return 0, 0
	}
	rel := int64(binary.LittleEndian.Uint64(rec[markerabi.CMarkerRelOffset:]))
	markerAddr = probeAddr + markerabi.CMarkerRelOffset + uint64(rel)
	got, ok := readAddr(f, markerAddr, len(code), elf.PF_X)
	if !ok || string(got) != code {
		return 0, 0
	}
	return markerAddr, probeAddr
}

// cMarkerCode is the C marker's code by architecture: a nop then a
// return. uprobe_marker_sysv reads the event's address from the first
// argument register (PT_REGS_PARM1: %rdi, x0).
var cMarkerCode = map[elf.Machine]string{
	elf.EM_X86_64:  "\x90\xc3",                         // nop; ret
	elf.EM_AARCH64: "\x1f\x20\x03\xd5\xc0\x03\x5f\xd6", // nop; ret (little endian)
}

// readAddr reads n bytes at a virtual address from the file-backed part of
// a loadable segment with the flags want.
func readAddr(f *elf.File, addr uint64, n int, want elf.ProgFlag) ([]byte, bool) {
	for _, p := range f.Progs {
		if p.Type != elf.PT_LOAD || p.Flags&want != want || addr < p.Vaddr || addr-p.Vaddr > p.Filesz || p.Filesz-(addr-p.Vaddr) < uint64(n) {
			continue
		}
		b := make([]byte, n)
		if _, err := p.ReadAt(b, int64(addr-p.Vaddr)); err != nil {
			return nil, false
		}
		return b, true
	}
	return nil, false
}

func markerBySymbols(f *elf.File, caps *[]string) (markerAddr, probeAddr uint64) {
	table := elfread.Table(f, elf.SHT_SYMTAB)
	strs := elfread.StringTable(f, table)
	if table == nil || strs == nil {
		return 0, 0
	}
	strtab, cut, err := elfread.ReadSection(strs, markerMaxSection, nil, nil)
	if err != nil {
		return 0, 0
	}
	if cut {
		*caps = append(*caps, userfile.ReasonSection)
	}
	capped, _ := elfread.Symbols(f, table, markerMaxSection, func(s elfread.Symbol) bool {
		switch {
		case elfread.NameIs(strtab, s.Name, markerSymbol):
			markerAddr = s.Value
		case elfread.NameIs(strtab, s.Name, probeSymbol):
			probeAddr = s.Value + probeWordOffset
		}
		return markerAddr == 0 || probeAddr == 0
	})
	if capped {
		*caps = append(*caps, userfile.ReasonSymbols)
	}
	return markerAddr, probeAddr
}

// markerByPclntab finds the marker through the Go line table, which
// stripped Go binaries keep.
func markerByPclntab(f *elf.File, caps *[]string) uint64 {
	tab := pclnTable(f, caps)
	if tab == nil {
		return 0
	}
	for _, name := range []string{markerSymbol, strings.TrimSuffix(markerSymbol, ".abi0")} {
		if fn := tab.LookupFunc(name); fn != nil {
			return fn.Entry
		}
	}
	return 0
}

// pclnTable reads a Go binary's line table, or returns nil.
func pclnTable(f *elf.File, caps *[]string) *gosym.Table {
	pcln, text := f.Section(".gopclntab"), f.Section(".text")
	if pcln == nil || text == nil {
		return nil
	}
	if pcln.Size > markerMaxSection {
		userfile.Count(userfile.ReasonSection)
		*caps = append(*caps, userfile.ReasonSection)
		return nil
	}
	data, _, err := elfread.ReadSection(pcln, markerMaxSection, nil, nil)
	if err != nil {
		return nil
	}
	if n, ok := elfread.GoFuncs(data, f.ByteOrder); !ok || n > markerMaxFuncs {
		if ok {
			userfile.Count(userfile.ReasonGoFuncs)
			*caps = append(*caps, userfile.ReasonGoFuncs)
		}
		return nil
	}
	tab, err := gosym.NewTable(nil, gosym.NewLineTable(data, text.Addr))
	if err != nil {
		return nil
	}
	return tab
}

// probeByMagic finds an enable word by the magic pair that follows it (the
// Go SDK's probeMagic or libspanwatch's), in the writable segments, read a
// chunk at a time up to the cap.
func probeByMagic(f *elf.File, want uint64, caps *[]string) uint64 {
	var magic [16]byte
	binary.LittleEndian.PutUint64(magic[:], want)
	binary.LittleEndian.PutUint64(magic[8:], ^want)
	const chunk = 1 << 20
	buf := make([]byte, chunk+len(magic))
	for _, p := range f.Progs {
		if p.Type != elf.PT_LOAD || p.Flags&elf.PF_W == 0 {
			continue
		}
		size := p.Filesz
		if size > markerMaxSection {
			size = markerMaxSection
			userfile.Count(userfile.ReasonSection)
			*caps = append(*caps, userfile.ReasonSection)
		}
		// Chunks overlap by the magic's length, so a match across two is
		// found; base is the segment offset of buf[0].
		for base := uint64(0); base < size; base += chunk {
			n, err := p.ReadAt(buf[:min(uint64(len(buf)), size-base)], int64(base))
			if n == 0 && err != nil {
				break
			}
			data := buf[:n]
			for off := 0; off+16 <= len(data); {
				i := bytes.Index(data[off:], magic[:])
				if i < 0 {
					break
				}
				at := base + uint64(off+i)
				if (p.Vaddr+at)%8 == 0 && at >= 8 {
					return p.Vaddr + at - 8
				}
				off += i + 1
			}
		}
	}
	return 0
}

// fileOffset maps a virtual address to its offset in the file through the
// loadable segments.
func fileOffset(f *elf.File, addr uint64) (uint64, error) {
	for _, p := range f.Progs {
		if p.Type != elf.PT_LOAD {
			continue
		}
		if addr >= p.Vaddr && addr < p.Vaddr+p.Filesz {
			return addr - p.Vaddr + p.Off, nil
		}
	}
	return 0, fmt.Errorf("address 0x%x is in no file-backed segment", addr)
}
