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
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"

	"github.com/spanwatch/spanwatch/internal/markerabi"
)

// The span SDK's marker function and enable word (emit/probe.go).
const (
	markerSymbol = "github.com/spanwatch/spanwatch/emit.marker.abi0"
	probeSymbol  = "github.com/spanwatch/spanwatch/emit.probe"
)

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
	prog  *ebpf.Program
	multi bool // prog is loaded for uprobe_multi links
	cfg   Config

	// attachMu is held across a whole check-and-attach (and a scan), so
	// no binary is attached twice: two callers of attachPath for one
	// binary, or a scan racing ScanMarkers, find one link.
	attachMu sync.Mutex
	closed   bool                      // under attachMu: close ran, nothing is attached any more
	mu       sync.Mutex                // guards binaries, for attached() during an attach
	binaries map[fileKey]*markerBinary // link nil: checked, no marker
}

func newMarkerSource(prog *ebpf.Program, multi bool, cfg Config) *markerSource {
	return &markerSource{prog: prog, multi: multi, cfg: cfg, binaries: map[fileKey]*markerBinary{}}
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

// scan looks at every process's executable and attaches to new ones that
// contain the marker, then lets go of the binaries no process ran in the
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
		exe := filepath.Join(m.cfg.ProcRoot, e.Name(), "exe")
		key, ok, err := m.attachLocked(exe)
		if ok {
			seen[key] = true
		}
		if err != nil {
			m.cfg.Logger.Debug("marker_attach_failed", "exe", exe, "error", err)
		}
	}
	for _, b := range m.cfg.MarkerBinaries {
		key, ok, err := m.attachLocked(b)
		if ok {
			seen[key] = true
		}
		if err != nil {
			m.cfg.Logger.Debug("marker_attach_failed", "exe", b, "error", err)
		}
	}
	m.release(seen)
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
	_, _, err := m.attachLocked(path)
	return err
}

// attachLocked is attachPath with m.attachMu held. It returns the binary's
// identity, with ok true, when path names a regular file, whether or not
// it has the marker.
func (m *markerSource) attachLocked(path string) (key fileKey, ok bool, err error) {
	fi, err := os.Stat(path)
	if err != nil {
		return fileKey{}, false, err
	}
	st, isStat := fi.Sys().(*syscall.Stat_t)
	if !isStat || !fi.Mode().IsRegular() {
		return fileKey{}, false, nil
	}
	key = fileKey{dev: st.Dev, ino: st.Ino, mtime: fi.ModTime().UnixNano(), size: fi.Size()}
	m.mu.Lock()
	_, seen := m.binaries[key]
	m.mu.Unlock()
	if seen {
		return key, true, nil
	}
	markerOff, semOff, markerAddr, _, err := findMarker(path)
	if err != nil {
		m.mu.Lock()
		m.binaries[key] = &markerBinary{path: path}
		m.mu.Unlock()
		if errors.Is(err, errNoMarker) {
			return key, true, nil
		}
		return key, true, err
	}
	ex, err := link.OpenExecutable(path)
	if err != nil {
		return key, true, fmt.Errorf("open %s: %w", path, err)
	}
	var l link.Link
	if m.multi {
		l, err = ex.UprobeMulti(nil, m.prog, &link.UprobeMultiOptions{Addresses: []uint64{markerOff}, RefCtrOffsets: []uint64{semOff}})
	} else {
		l, err = ex.Uprobe("", m.prog, &link.UprobeOptions{Address: markerOff, RefCtrOffset: semOff})
	}
	if err != nil {
		if !m.multi && errors.Is(err, os.ErrPermission) {
			return key, true, fmt.Errorf("uprobe %s in %s: the perf_uprobe PMU needs CAP_SYS_ADMIN (kernels before 6.6, or NoUprobeMulti): %w", markerSymbol, path, err)
		}
		return key, true, fmt.Errorf("uprobe %s in %s (%s): %w", markerSymbol, path, m.method(), err)
	}
	real, _ := os.Readlink(path)
	if real == "" {
		real = path
	}
	// Stacks of processes that exit before their maps are read are
	// named from the binary: the marker's address gives the load bias.
	addAnchor(m.cfg, real, path, markerAddr)
	m.mu.Lock()
	m.binaries[key] = &markerBinary{path: real, link: l}
	m.mu.Unlock()
	m.cfg.Logger.Info("marker_attached", "binary", real, "offset", markerOff, "semaphore", semOff, "method", m.method())
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

// probeWordOffset and probeMagic are emit/probe.go's, from
// internal/markerabi: the enable word sits probeWordOffset bytes into
// emit.probe and is followed by the magic pair.
const (
	probeWordOffset = markerabi.WordOffset
	probeMagic      = markerabi.Magic
)

// findMarker returns the file offsets of the marker function and of the
// enable word (the uprobe's reference counter) in an ELF file. Binaries
// without a symbol table (go build -ldflags=-s, go test) are searched
// through the Go pclntab and the enable word's magic.
func findMarker(path string) (markerOff, semOff, markerAddr uint64, pie bool, err error) {
	f, err := elf.Open(path)
	if err != nil {
		return 0, 0, 0, false, errNoMarker // not an ELF file: nothing to attach
	}
	defer f.Close()
	var probeAddr uint64
	markerAddr, probeAddr = markerBySymbols(f)
	if markerAddr == 0 {
		markerAddr = markerByPclntab(f)
	}
	if probeAddr == 0 && markerAddr != 0 {
		probeAddr = probeByMagic(f)
	}
	if markerAddr == 0 || probeAddr == 0 {
		return 0, 0, 0, false, errNoMarker
	}
	if markerOff, err = fileOffset(f, markerAddr); err != nil {
		return 0, 0, 0, false, fmt.Errorf("%s: %s: %w", path, markerSymbol, err)
	}
	if semOff, err = fileOffset(f, probeAddr); err != nil {
		return 0, 0, 0, false, fmt.Errorf("%s: %s: %w", path, probeSymbol, err)
	}
	return markerOff, semOff, markerAddr, f.Type == elf.ET_DYN, nil
}

func markerBySymbols(f *elf.File) (markerAddr, probeAddr uint64) {
	syms, err := f.Symbols()
	if err != nil {
		return 0, 0
	}
	for _, s := range syms {
		switch s.Name {
		case markerSymbol:
			markerAddr = s.Value
		case probeSymbol:
			probeAddr = s.Value + probeWordOffset
		}
	}
	return markerAddr, probeAddr
}

// markerByPclntab finds the marker through the Go line table, which
// stripped Go binaries keep.
func markerByPclntab(f *elf.File) uint64 {
	tab := pclnTable(f)
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
func pclnTable(f *elf.File) *gosym.Table {
	pcln, text := f.Section(".gopclntab"), f.Section(".text")
	if pcln == nil || text == nil || pcln.Size > 1<<30 {
		return nil
	}
	data, err := pcln.Data()
	if err != nil {
		return nil
	}
	tab, err := gosym.NewTable(nil, gosym.NewLineTable(data, text.Addr))
	if err != nil {
		return nil
	}
	return tab
}

// probeByMagic finds the enable word by the magic pair that follows it, in
// the writable segments.
func probeByMagic(f *elf.File) uint64 {
	var magic [16]byte
	binary.LittleEndian.PutUint64(magic[:], probeMagic)
	binary.LittleEndian.PutUint64(magic[8:], ^uint64(probeMagic))
	for _, p := range f.Progs {
		if p.Type != elf.PT_LOAD || p.Flags&elf.PF_W == 0 || p.Filesz > 1<<30 {
			continue
		}
		data := make([]byte, p.Filesz)
		if _, err := p.ReadAt(data, 0); err != nil {
			continue
		}
		for off := 0; off+16 <= len(data); {
			i := bytes.Index(data[off:], magic[:])
			if i < 0 {
				break
			}
			at := off + i
			if (p.Vaddr+uint64(at))%8 == 0 && at >= 8 {
				return p.Vaddr + uint64(at) - 8
			}
			off = at + 1
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
