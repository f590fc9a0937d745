package symbolize

import (
	"bytes"
	"sort"
	"strconv"
	"strings"
	"sync/atomic"

	"github.com/spanwatch/spanwatch/internal/userfile"
)

// A perfMap is a JIT's /tmp/perf-PID.map: one "START SIZE NAME" line (hex,
// with or without 0x) per generated function, the format perf reads. JITs
// append to it as they compile, and may reuse a range; the later line wins.
// Names are kept in one buffer, so a map costs its entries and its names.
type perfMap struct {
	entries []perfEntry
	names   []byte
	budget  *budget
	// info is what fstat said of the file read, so that a capture again
	// after a miss reuses the map when the file did not change.
	info userfile.Info
	refs atomic.Int32 // processes holding it; freed at 0
}

type perfEntry struct {
	start, end uint64
	name, len  uint32 // the name is names[name : name+len]
}

const perfEntrySize = 24 // bytes of one perfEntry

// parsePerfMap parses a perf map read up to the cap (truncated: there was
// more), keeping at most maxPerfMapEntries entries within the budget.
func parsePerfMap(b []byte, truncated bool, bud *budget) *perfMap {
	if truncated {
		bud.hitCount(userfile.ReasonPerfMapSize)
		// The last line may be cut: drop it.
		if i := bytes.LastIndexByte(b, '\n'); i >= 0 {
			b = b[:i+1]
		}
	}
	pm := &perfMap{budget: bud}
	pm.refs.Store(1)
	for len(b) > 0 {
		line := b
		if i := bytes.IndexByte(b, '\n'); i >= 0 {
			line, b = b[:i], b[i+1:]
		} else {
			b = nil
		}
		e, name, ok := parsePerfMapLine(line)
		if !ok {
			continue
		}
		if len(pm.entries) >= maxPerfMapEntries {
			bud.hitCount(userfile.ReasonPerfMapLines)
			break
		}
		if !bud.take(perfEntrySize + int64(len(name))) {
			break
		}
		e.name, e.len = uint32(len(pm.names)), uint32(len(name))
		pm.names = append(pm.names, name...)
		pm.entries = append(pm.entries, e)
	}
	// Stable, so that of two lines for one start the later stays later.
	sort.SliceStable(pm.entries, func(i, j int) bool { return pm.entries[i].start < pm.entries[j].start })
	out := pm.entries[:0]
	for _, e := range pm.entries {
		if n := len(out); n > 0 && out[n-1].start == e.start {
			out[n-1] = e
			continue
		}
		out = append(out, e)
	}
	pm.entries = out
	return pm
}

// parsePerfMapLine parses one line; the name is a slice of b.
func parsePerfMapLine(b []byte) (perfEntry, []byte, bool) {
	b = bytes.TrimSpace(b)
	a, rest, ok := bytes.Cut(b, []byte{' '})
	if !ok {
		return perfEntry{}, nil, false
	}
	sz, name, ok := bytes.Cut(bytes.TrimLeft(rest, " "), []byte{' '})
	if !ok {
		return perfEntry{}, nil, false
	}
	start, err1 := strconv.ParseUint(strings.TrimPrefix(string(a), "0x"), 16, 64)
	size, err2 := strconv.ParseUint(strings.TrimPrefix(string(sz), "0x"), 16, 64)
	if err1 != nil || err2 != nil || size == 0 || start+size < start {
		return perfEntry{}, nil, false
	}
	name = bytes.TrimSpace(name)
	if len(name) > 1<<16 {
		name = name[:1<<16]
	}
	return perfEntry{start: start, end: start + size}, name, true
}

func (pm *perfMap) lookup(addr uint64) (perfEntry, string, bool) {
	i := sort.Search(len(pm.entries), func(i int) bool { return pm.entries[i].start > addr }) - 1
	if i < 0 || addr >= pm.entries[i].end {
		return perfEntry{}, "", false
	}
	e := pm.entries[i]
	return e, string(pm.names[e.name : e.name+e.len]), true
}

// hold takes one more reference.
func (pm *perfMap) hold() *perfMap {
	pm.refs.Add(1)
	return pm
}

// free drops a reference; the last one returns the map's memory to the
// budget.
func (pm *perfMap) free() {
	if pm.refs.Add(-1) == 0 {
		pm.budget.release()
	}
}

// same reports whether fstat's info is of the file the map was read from,
// unchanged.
func (pm *perfMap) same(info userfile.Info) bool {
	return info.Dev == pm.info.Dev && info.Ino == pm.info.Ino && info.Size == pm.info.Size && info.ModTime.Equal(pm.info.ModTime)
}
