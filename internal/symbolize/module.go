package symbolize

import (
	"context"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ianlancetaylor/demangle"

	"github.com/spanwatch/spanwatch/internal/userfile"
)

// A module is one ELF file mapped by one or more processes, opened once and
// shared. The file stays open while a process that maps it is cached, so a
// process that exits, or a file deleted or renamed over on disk, still
// symbolizes from what was mapped (a file truncated or rewritten in place
// gives unnamed frames).
//
// Its tables are parsed on its first lookup, on a goroutine of their own
// bounded by loadTimeout (userfile.Do): lookups wait for them, but not
// past loadWait Config.Timeouts after the load started, so a file that
// parses slowly or hangs (a FUSE file whose daemon stopped answering)
// costs one wait, not one per stack.
type module struct {
	name  string // base name, for Frame.Module
	path  string // as the process saw it
	file  *userfile.File
	r     io.ReaderAt // file, or the vDSO's bytes
	key   fileKey
	refs  int         // under Symbolizer.mu: processes and anchors holding it
	debug *debugPlace // where to look for a separate debug file; nil: nowhere
	s     *Symbolizer

	start   sync.Once
	started atomic.Int64  // unix nanoseconds the load started
	done    chan struct{} // closed once t and err are set

	mu     sync.Mutex // guards what follows; held while a lookup reads t
	t      *tables    // nil when the load failed or the module is closed
	err    error
	closed bool
	// cache holds recent lookups: overruns of one span repeat the same
	// stacks, and a Go pclntab lookup decodes a table each time.
	cache     map[uint64][]result
	demangled map[int]string
}

type result struct {
	fn, file string
	line     int
}

// maxCache bounds a module's lookup cache; it is emptied when full, or
// when the symbolizer's memory cap leaves no room for an entry.
const maxCache = 1 << 12

// cacheEntrySize is about what one cached lookup takes, for the budget.
const cacheEntrySize = 128

// loadWait is how many Config.Timeouts lookups wait for a file's tables
// after its parse started (10 s by default): a big binary's first parse
// on a busy node takes seconds, and is waited for once.
const loadWait = 5

// loadTimeout bounds one file's parse (or loadWait Config.Timeouts, when
// longer). Parsing a big binary takes a second or two on a busy node; a
// parse still running past this is stuck (a file system that stopped
// answering) and left behind.
const loadTimeout = 30 * time.Second

// errNotLoaded says a module's tables are still being read.
var errNotLoaded = errors.New("symbols not read yet")

func newModule(s *Symbolizer, f *userfile.File, path string, key fileKey) *module {
	return &module{
		name: filepath.Base(strings.TrimSuffix(path, " (deleted)")), path: path,
		file: f, r: f, key: key, s: s, done: make(chan struct{}),
	}
}

// newMemModule is a module read from memory (the vDSO's image).
func newMemModule(s *Symbolizer, name string, r io.ReaderAt, key fileKey) *module {
	return &module{name: name, path: name, r: r, key: key, s: s, done: make(chan struct{})}
}

// close frees the tables, if loaded, and closes the file. A load still
// running frees what it reads when it ends.
func (m *module) close() error {
	m.mu.Lock()
	m.closed = true
	if m.t != nil {
		m.t.free()
		m.t = nil
	}
	m.cache, m.demangled = nil, nil
	m.mu.Unlock()
	if m.file != nil {
		return m.file.Close()
	}
	return nil
}

// load parses the file. It runs once, on a goroutine of its own.
func (m *module) load() {
	defer close(m.done)
	ctx, cancel := context.WithTimeout(m.s.base, max(loadTimeout, loadWait*m.s.cfg.Timeout))
	defer cancel()
	lim := m.s.lim
	b := newBudget(lim.Module, &m.s.memory, lim.Memory)
	var dbg *debugPlace
	if m.debug != nil {
		d := *m.debug
		d.ctx = ctx
		dbg = &d
	}
	// Only a file system that stopped answering (FUSE, a network) makes
	// a parse hang: a stuck parse there stalls the loading of that file
	// system's files, not others'. A parse of a local file can only be
	// slow, and stalls nothing else.
	on := fmt.Sprintf("device %d", m.key.dev)
	if m.file == nil || m.file.Info.Local {
		on = fmt.Sprintf("file %d:%d", m.key.dev, m.key.inode)
	}
	t, err := userfile.Do(ctx, on, func() (*tables, error) {
		p := &parser{path: m.path, r: m.r, file: m.file, lim: lim, t: &tables{budget: b}, debug: dbg}
		return p.parse()
	}, (*tables).free)
	m.mu.Lock()
	if m.closed && t != nil {
		t.free()
		t, err = nil, ErrClosed
	}
	m.t, m.err = t, err
	m.mu.Unlock()
	if caps := b.caps(); len(caps) > 0 {
		m.s.log.Warn("symbolize_file_capped", "path", m.path, "caps", strings.Join(caps, ","), "bytes", b.bytes(),
			"hint", "frames in this file are named as far as the caps allowed (symbolize.Limits)")
	}
	if err != nil && !errors.Is(err, ErrClosed) {
		m.s.log.Debug("module_unparsable", "path", m.path, "error", err)
	}
}

// with runs fn with the module's tables, under its lock, once they are
// loaded; it starts the load on first use. It waits for the load until ctx
// ends, and not past loadWait Config.Timeouts after the load started:
// later calls while the load runs return errNotLoaded at once.
func (m *module) with(ctx context.Context, fn func(t *tables)) error {
	m.start.Do(func() {
		m.started.Store(time.Now().UnixNano())
		go m.load()
	})
	select {
	case <-m.done:
	default:
		left := time.Until(time.Unix(0, m.started.Load()).Add(loadWait * m.s.cfg.Timeout))
		if left <= 0 {
			return errNotLoaded
		}
		t := time.NewTimer(left)
		defer t.Stop()
		select {
		case <-m.done:
		case <-ctx.Done():
			return errNotLoaded
		case <-t.C:
			return errNotLoaded
		}
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.t == nil {
		if m.err != nil {
			return m.err
		}
		return ErrClosed
	}
	return guard(func() error { fn(m.t); return nil })
}

// fileOffsetToAddr turns a file offset into the address the ELF file's own
// tools (symbols, DWARF, addr2line) use.
func (t *tables) fileOffsetToAddr(off uint64) (uint64, bool) {
	for _, p := range t.loads {
		if off >= p.Off && off < p.Off+p.Filesz {
			return off - p.Off + p.Vaddr, true
		}
	}
	return 0, false
}

// lookupLocked symbolizes one address of the module (an ELF virtual
// address): the calls inlined there, innermost first, then the function
// the address is in. It never returns an empty slice; callers must not
// modify it. m.mu is held and m.t loaded.
func (m *module) lookupLocked(addr uint64) []result {
	if r, ok := m.cache[addr]; ok {
		return r
	}
	t := m.t
	var res []result
	if err := guard(func() error { res = m.resolve(t, addr); return nil }); err != nil || len(res) == 0 {
		res = []result{{}}
	}
	if m.cache == nil || len(m.cache) >= maxCache || !t.budget.take(cacheEntrySize) {
		t.budget.give(int64(len(m.cache)) * cacheEntrySize)
		m.cache = make(map[uint64][]result)
		if !t.budget.take(cacheEntrySize) {
			return res
		}
	}
	m.cache[addr] = res
	return res
}

func (m *module) resolve(t *tables, addr uint64) []result {
	if t.gotab != nil {
		if _, _, f := t.gotab.PCToLine(addr); f != nil {
			var res []result
			names, pcs := []string(nil), []uint64{addr}
			if t.inline != nil {
				if n, p := t.inline.chain(addr); n != nil {
					names, pcs = append(n, f.Name), p
				}
			}
			if names == nil {
				names = []string{f.Name}
			}
			for i, name := range names {
				file, line, _ := t.gotab.PCToLine(pcs[i])
				if line <= 0 || file == "" {
					// gosym recovers from an unreadable table with -1 and "".
					file, line = "", 0
				}
				res = append(res, result{name, file, line})
			}
			return res
		}
	}
	r := result{fn: m.symbolAt(t, addr)}
	if t.lines != nil && r.fn != "" {
		r.file, r.line = t.lines.lookup(addr)
	}
	return []result{r}
}

// symbolAt returns the name of the function symbol holding addr,
// demangled. m.mu is held.
func (m *module) symbolAt(t *tables, addr uint64) string {
	i := sort.Search(len(t.syms), func(i int) bool { return t.syms[i].addr > addr }) - 1
	if i < 0 {
		return ""
	}
	s := t.syms[i]
	if s.size != 0 && addr >= s.addr+s.size {
		return ""
	}
	name := t.name(s)
	if !strings.HasPrefix(name, "_Z") {
		return name
	}
	if d, ok := m.demangled[i]; ok {
		return d
	}
	d := demangle.Filter(name, demangle.NoParams)
	if m.demangled == nil || len(m.demangled) >= maxCache {
		m.demangled = map[int]string{}
	}
	m.demangled[i] = d
	return d
}
