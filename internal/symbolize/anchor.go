package symbolize

import (
	"context"
	"debug/elf"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/spanwatch/spanwatch/internal/elfread"
	"github.com/spanwatch/spanwatch/internal/userfile"
	"github.com/spanwatch/spanwatch/snapshot"
	"golang.org/x/sys/unix"
)

// An Anchor is a code address in a binary that spanwatch traces: a USDT
// probe site or the span SDK's marker, where a uprobe fires. A stack taken
// there starts with the anchor's run-time address, so the difference to
// its address in the file is the binary's load bias in that process:
// frames inside the binary can be named without the process's maps, after
// it exited (a short-lived fork, a backend that ends its session).
type Anchor struct {
	// Path names the binary in frames (its base name, as in maps).
	Path string
	// Open is where to open it, when not Path (/proc/PID/exe, say).
	Open string
	// Addr is the site's address in the file's own terms (the ELF
	// virtual address USDT notes and symbols give).
	Addr uint64
	// Reader, when set, is the process the binary was found running in:
	// the binary is read only if that process could read it itself. Nil
	// for a binary the operator named.
	Reader *userfile.Cred
	// Root, when set, is the root the binary's separate debug file is
	// looked for in first (/proc/PID/root of the process it runs in);
	// the host's root is looked in after it.
	Root string
}

// anchorMod is a binary with anchors, open until RemoveAnchor or Close.
type anchorMod struct {
	mod   *module
	pie   bool     // ET_DYN: loaded anywhere, page-aligned
	addrs []uint64 // its anchors
	exec  [][2]uint64
}

// AddAnchor keeps a traced binary open and remembers one of its probe
// sites, so that User names frames in it for processes that exited before
// they were captured. Adding a site twice is harmless. The binary is
// opened and its headers read outside the symbolizer's lock, within
// Config.Timeout.
func (s *Symbolizer) AddAnchor(a Anchor) error {
	open := a.Open
	if open == "" {
		open = a.Path
	}
	ctx, cancel := s.op()
	defer cancel()
	on := ""
	if a.Reader != nil {
		on = userfile.OnUID(a.Reader.UID[1])
	}
	f, err := userfile.OpenRooted(ctx, open, userfile.Options{Reader: a.Reader, On: on})
	if err != nil {
		return fmt.Errorf("anchor %s: %w", a.Path, err)
	}
	key := statKey(f.Info.Dev, f.Info.Ino)
	if s.addSite(key, a.Addr) {
		f.Close()
		return nil
	}
	type header struct {
		pie  bool
		exec [][2]uint64
	}
	h, err := userfile.Do(ctx, fmt.Sprintf("device %d", f.Info.Dev), func() (header, error) {
		ef, err := elfread.NewFile(f)
		if err != nil {
			return header{}, err
		}
		h := header{pie: ef.Type == elf.ET_DYN}
		for _, p := range ef.Progs {
			if p.Type == elf.PT_LOAD && p.Flags&elf.PF_X != 0 {
				h.exec = append(h.exec, [2]uint64{p.Vaddr, p.Vaddr + p.Memsz})
			}
		}
		return h, nil
	}, nil)
	if err != nil {
		f.Close()
		return fmt.Errorf("anchor %s: %w", a.Path, err)
	}
	m := newModule(s, f, a.Path, key)
	m.debug = &debugPlace{root: a.Root, path: a.Path, reader: a.Reader, on: on}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		m.close()
		return ErrClosed
	}
	if old := s.anchors[key]; old != nil {
		// Added meanwhile.
		m.close()
		addAddr(old, a.Addr)
		return nil
	}
	// One module per file: a process running the binary, captured before
	// or after, shares the anchor's, so the file is parsed once and a
	// process that exits between its maps and its files still names its
	// frames (openModule finds the anchor's module without opening).
	if old := s.modules[key]; old != nil {
		m.close()
		m = old
	} else {
		s.modules[key] = m
	}
	m.refs++
	if s.anchors == nil {
		s.anchors = map[fileKey]*anchorMod{}
	}
	s.anchors[key] = &anchorMod{mod: m, pie: h.pie, addrs: []uint64{a.Addr}, exec: h.exec}
	return nil
}

// statKey is the key of a file from fstat's device and inode: the device
// as /proc/PID/maps writes it (major<<32 | minor, as parseMaps reads it),
// so a file opened by path and a file mapped by a process meet.
func statKey(dev, ino uint64) fileKey {
	return fileKey{dev: uint64(unix.Major(dev))<<32 | uint64(unix.Minor(dev)), inode: ino}
}

// addSite adds a site to a binary already anchored; false when it is not.
func (s *Symbolizer) addSite(key fileKey, addr uint64) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	am := s.anchors[key]
	if am == nil {
		return false
	}
	addAddr(am, addr)
	return true
}

func addAddr(am *anchorMod, addr uint64) {
	for _, x := range am.addrs {
		if x == addr {
			return
		}
	}
	am.addrs = append(am.addrs, addr)
}

// RemoveAnchor forgets the anchors of the binary with device dev and inode
// ino (as fstat gives them) and closes it unless a process holds it: its tracer let go of it (no process runs it any more).
// Removing a binary without anchors is harmless.
func (s *Symbolizer) RemoveAnchor(dev, ino uint64) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	key := statKey(dev, ino)
	am := s.anchors[key]
	if am == nil {
		return nil
	}
	delete(s.anchors, key)
	if err := s.unref(am.mod); err != nil {
		return fmt.Errorf("anchor %s: %w", am.mod.path, err)
	}
	return nil
}

// errExitedAnchored says what an anchored stack is.
var errExitedAnchored = errors.New("the process exited before its maps were read")

// fromAnchors names the frames of a stack whose process was never
// captured, in the anchored binary whose site is the stack's first frame.
// It returns nil when no anchor fits.
func (s *Symbolizer) fromAnchors(ctx context.Context, addrs []uint64) ([]snapshot.Frame, *anchorMod) {
	if len(addrs) == 0 {
		return nil, nil
	}
	type site struct {
		am   *anchorMod
		addr uint64
	}
	var sites []site
	s.mu.Lock()
	for _, am := range s.anchors {
		for _, a := range am.addrs {
			sites = append(sites, site{am, a})
		}
	}
	s.mu.Unlock()
	page := uint64(os.Getpagesize())
	var best []snapshot.Frame
	var bestMod *anchorMod
	bestNamed := 0
	for _, st := range sites {
		am := st.am
		bias := addrs[0] - st.addr
		if (!am.pie && bias != 0) || (am.pie && bias%page != 0) {
			continue
		}
		var frames []snapshot.Frame
		var named int
		if err := am.mod.with(ctx, func(t *tables) { frames, named = am.symbolize(t, addrs, bias) }); err != nil {
			s.log.Debug("anchor_unparsable", "path", am.mod.path, "error", err)
			continue
		}
		if named > bestNamed {
			best, bestMod, bestNamed = frames, am, named
		}
	}
	return best, bestMod
}

// symbolize names addrs that fall in the binary's code at load bias bias.
// The module's lock is held and t loaded.
func (am *anchorMod) symbolize(t *tables, addrs []uint64, bias uint64) ([]snapshot.Frame, int) {
	frames := make([]snapshot.Frame, 0, len(addrs)+8)
	named := 0
	for i, a := range addrs {
		f := snapshot.Frame{Addr: a}
		pc := a - bias
		if i > 0 {
			pc-- // a return address: look up the call
		}
		inside := false
		for _, r := range am.exec {
			if pc >= r[0] && pc < r[1] {
				inside = true
			}
		}
		if !inside {
			frames = append(frames, f)
			continue
		}
		f.Module, f.Offset, f.BuildID = am.mod.name, a-bias, t.buildID
		res := am.mod.lookupLocked(pc)
		last := res[len(res)-1]
		f.Function, f.File, f.Line = last.fn, last.file, last.line
		for _, r := range res[:len(res)-1] {
			g := f
			g.Function, g.File, g.Line, g.Inlined = r.fn, r.file, r.line, true
			frames = append(frames, g)
		}
		if f.Function != "" {
			named++
		}
		frames = append(frames, f)
	}
	return frames, named
}

// Explain says why frames of a stack have no names when a binary they are
// in has no symbol table, no Go symbol table and no separate debug file:
// what file to install, and which package provides the binary where the
// Debian package database tells. It returns "" when nothing is to be
// done.
func (s *Symbolizer) Explain(frames []snapshot.Frame) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []string
	seen := map[string]bool{}
	for _, f := range frames {
		if f.Function != "" || f.BuildID == "" || seen[f.BuildID] {
			continue
		}
		seen[f.BuildID] = true
		if why, ok := s.unnamed[f.BuildID]; ok {
			out = append(out, why)
		}
	}
	return strings.Join(out, "; ")
}

// noteUnnamed records, for a module without symbols, what would name its
// frames. The dpkg database is read outside the lock.
func (s *Symbolizer) noteUnnamed(m *module) {
	var id string
	var none bool
	m.with(s.base, func(t *tables) { id, none = t.buildID, t.noSymbols })
	if !none || id == "" {
		return
	}
	s.mu.Lock()
	_, seen := s.unnamed[id]
	s.mu.Unlock()
	if seen {
		return
	}
	why := fmt.Sprintf("%s has no symbol table (stripped) and no debug file", m.name)
	if isHex(id) && len(id) > 2 {
		why += fmt.Sprintf(" (looked for /usr/lib/debug/.build-id/%s/%s.debug)", id[:2], id[2:])
	}
	why += ": its internal functions show as module+offset"
	if pkg := s.packageOf(m.path); pkg != "" {
		why += fmt.Sprintf("; install the debug symbols of Debian package %s (apt install %s-dbgsym, from the debian-debug archive; "+
			"find-dbgsym-packages %s names them), or on Fedora dnf debuginfo-install", pkg, pkg, m.path)
	} else {
		why += "; install the debug symbols of the package that provides it (Debian and Ubuntu: its -dbgsym package, " +
			"find-dbgsym-packages names it; Fedora: dnf debuginfo-install), or build it without stripping"
	}
	s.mu.Lock()
	if s.unnamed == nil {
		s.unnamed = map[string]string{}
	}
	s.unnamed[id] = why
	s.mu.Unlock()
}

func isHex(s string) bool {
	for _, c := range s {
		if !strings.ContainsRune("0123456789abcdef", c) {
			return false
		}
	}
	return true
}

// packageOf returns the Debian package that installed path, from dpkg's
// file lists (read once per path, only for stripped binaries), or "".
func (s *Symbolizer) packageOf(path string) string {
	path = strings.TrimSuffix(path, " (deleted)")
	lists, err := filepath.Glob(filepath.Join(s.cfg.DpkgInfo, "*.list"))
	if err != nil || len(lists) == 0 {
		return ""
	}
	// With a merged /usr, dpkg may list /bin/x for /usr/bin/x.
	alias := "/usr" + path
	if rest, ok := strings.CutPrefix(path, "/usr"); ok {
		alias = rest
	}
	for _, l := range lists {
		b, err := os.ReadFile(l)
		if err != nil {
			continue
		}
		text := "\n" + string(b)
		if strings.Contains(text, "\n"+path+"\n") || strings.Contains(text, "\n"+alias+"\n") {
			pkg := strings.TrimSuffix(filepath.Base(l), ".list")
			pkg, _, _ = strings.Cut(pkg, ":") // libfoo:amd64
			return pkg
		}
	}
	return ""
}
