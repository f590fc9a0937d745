package symbolize

import (
	"sync"
	"sync/atomic"

	"github.com/spanwatch/spanwatch/internal/userfile"
)

// Limits bound what the symbolizer reads of the files users control and
// keeps of them. A file past a cap is symbolized as far as the cap allows
// (a symbol table read up to it, DWARF units that fit, a perf map's first
// lines), the cap is counted under its reason (userfile.Counts) and logged
// once per file. The zero value takes the defaults.
type Limits struct {
	// Section is the most bytes of one section or segment read into
	// memory, after decompression: a symbol or string table, a DWARF
	// section, a Go pclntab on a file system that is not mapped. 64 MiB
	// when zero.
	Section int64
	// Mapped is the most bytes of one section or segment mapped from a
	// file on a local file system (shared with the page cache, not heap):
	// a Go binary's pclntab, the segments searched for it. 512 MiB when
	// zero.
	Mapped int64
	// Symbols is the most function symbols kept of one file, and the
	// most functions of a Go pclntab used (a table with more is not
	// used). 1<<20 when zero.
	Symbols int
	// LineRows is the most DWARF line rows kept of one file. 1<<21 when
	// zero.
	LineRows int
	// Module is the most memory one file's tables take on the heap:
	// copies of sections, symbols, line rows, Go function tables. 64 MiB
	// when zero.
	Module int64
	// Memory is the most memory all files' tables, perf maps and lookup
	// caches take together; past it, new tables are not read and lookup
	// caches are emptied. 256 MiB when zero.
	Memory int64
	// PerfMap is the most bytes of a perf map read; its entries past them
	// are not read. 16 MiB when zero.
	PerfMap int64
}

// maxPerfMapEntries bounds the entries kept of one perf map.
const maxPerfMapEntries = 1 << 20

func (l Limits) withDefaults() Limits {
	if l.Section <= 0 {
		l.Section = 64 << 20
	}
	if l.Mapped <= 0 {
		l.Mapped = 512 << 20
	}
	if l.Symbols <= 0 {
		l.Symbols = 1 << 20
	}
	if l.LineRows <= 0 {
		l.LineRows = 1 << 21
	}
	if l.Module <= 0 {
		l.Module = 64 << 20
	}
	if l.Memory <= 0 {
		l.Memory = 256 << 20
	}
	if l.PerfMap <= 0 {
		l.PerfMap = 16 << 20
	}
	return l
}

// A budget is what one file's tables (or one perf map) may take of the
// heap, within the symbolizer's total. It records the caps the file hit,
// counting each once.
type budget struct {
	limit int64         // this file's cap
	total *atomic.Int64 // the symbolizer's use
	max   int64         // the symbolizer's cap

	mu     sync.Mutex
	used   int64
	capped []string
}

func newBudget(limit int64, total *atomic.Int64, max int64) *budget {
	return &budget{limit: limit, total: total, max: max}
}

// take reserves n bytes; false (with the cap counted) when they do not fit.
func (b *budget) take(n int64) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if n <= 0 {
		return true
	}
	if b.used+n > b.limit {
		b.hitLocked(userfile.ReasonModuleMemory)
		return false
	}
	if b.total.Add(n) > b.max {
		b.total.Add(-n)
		b.hitLocked(userfile.ReasonMemory)
		return false
	}
	b.used += n
	return true
}

// grant takes up to n bytes, as many as fit, and returns how many; a
// grant short of n counts the cap it hit.
func (b *budget) grant(n int64) int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	if n <= 0 {
		return 0
	}
	g, reason := n, ""
	if room := b.limit - b.used; g > room {
		g, reason = room, userfile.ReasonModuleMemory
	}
	if room := b.max - b.total.Load(); g > room {
		g, reason = room, userfile.ReasonMemory
	}
	if g <= 0 {
		b.hitLocked(reason)
		return 0
	}
	if reason != "" {
		b.hitLocked(reason)
	}
	b.total.Add(g)
	b.used += g
	return g
}

// give returns n bytes taken earlier.
func (b *budget) give(n int64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	n = min(n, b.used)
	b.used -= n
	b.total.Add(-n)
}

// release returns everything the file took.
func (b *budget) release() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.total.Add(-b.used)
	b.used = 0
}

// hit records a cap the file hit, for its log line. Reasons counted
// elsewhere (by elfread) are only recorded here.
func (b *budget) hit(reason string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.noteLocked(reason)
}

// hitCount records a cap and counts it, once per file.
func (b *budget) hitCount(reason string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.hitLocked(reason)
}

func (b *budget) hitLocked(reason string) {
	if b.noteLocked(reason) {
		userfile.Count(reason)
	}
}

func (b *budget) noteLocked(reason string) bool {
	for _, r := range b.capped {
		if r == reason {
			return false
		}
	}
	b.capped = append(b.capped, reason)
	return true
}

// caps returns the caps the file hit.
func (b *budget) caps() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]string(nil), b.capped...)
}

func (b *budget) bytes() int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.used
}
