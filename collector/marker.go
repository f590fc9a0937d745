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
	path string // where it was first seen
	link link.Link
}

// markerSource uprobes the span SDK's marker in every binary that has it.
// A uprobe is per file, so one attachment serves every process running it.
type markerSource struct {
	prog  *ebpf.Program
	multi bool // prog is loaded for uprobe_multi links
	cfg   Config

	mu       sync.Mutex
	binaries map[fileKey]*markerBinary // nil value: checked, no marker
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
// contain the marker.
func (m *markerSource) scan() {
	ents, err := os.ReadDir(m.cfg.ProcRoot)
	if err != nil {
		m.cfg.Logger.Warn("proc_scan_failed", "error", err)
		return
	}
	for _, e := range ents {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		exe := filepath.Join(m.cfg.ProcRoot, e.Name(), "exe")
		if err := m.attachPath(exe); err != nil {
			m.cfg.Logger.Debug("marker_attach_failed", "exe", exe, "error", err)
		}
	}
}

// attachPath uprobes the marker in the binary at path, if it has one and is
// not attached yet. A binary without the marker is not an error.
func (m *markerSource) attachPath(path string) error {
	fi, err := os.Stat(path)
	if err != nil {
		return err
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok || !fi.Mode().IsRegular() {
		return nil
	}
	key := fileKey{dev: st.Dev, ino: st.Ino, mtime: fi.ModTime().UnixNano(), size: fi.Size()}
	m.mu.Lock()
	_, seen := m.binaries[key]
	m.mu.Unlock()
	if seen {
		return nil
	}
	markerOff, semOff, markerAddr, _, err := findMarker(path)
	if err != nil {
		m.mu.Lock()
		m.binaries[key] = nil
		m.mu.Unlock()
		if errors.Is(err, errNoMarker) {
			return nil
		}
		return err
	}
	ex, err := link.OpenExecutable(path)
	if err != nil {
		return fmt.Errorf("open %s: %w", path, err)
	}
	var l link.Link
	if m.multi {
		l, err = ex.UprobeMulti(nil, m.prog, &link.UprobeMultiOptions{Addresses: []uint64{markerOff}, RefCtrOffsets: []uint64{semOff}})
	} else {
		l, err = ex.Uprobe("", m.prog, &link.UprobeOptions{Address: markerOff, RefCtrOffset: semOff})
	}
	if err != nil {
		if !m.multi && errors.Is(err, os.ErrPermission) {
			return fmt.Errorf("uprobe %s in %s: the perf_uprobe PMU needs CAP_SYS_ADMIN (kernels before 6.6, or NoUprobeMulti): %w", markerSymbol, path, err)
		}
		return fmt.Errorf("uprobe %s in %s (%s): %w", markerSymbol, path, m.method(), err)
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
	return nil
}

func (m *markerSource) attached() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []string
	for _, b := range m.binaries {
		if b != nil {
			out = append(out, b.path)
		}
	}
	sort.Strings(out)
	return out
}

func (m *markerSource) close() {
	m.mu.Lock()
	defer m.mu.Unlock()
	for k, b := range m.binaries {
		if b != nil {
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
