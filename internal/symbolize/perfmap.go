package symbolize

import (
	"bufio"
	"bytes"
	"os"
	"sort"
	"strconv"
	"strings"
	"time"
)

// A perfMap is a JIT's /tmp/perf-PID.map: one "START SIZE NAME" line (hex,
// with or without 0x) per generated function, the format perf reads. JITs
// append to it as they compile, and may reuse a range; the later line wins.
type perfMap struct {
	path    string
	size    int64
	modTime time.Time
	entries []perfEntry
}

type perfEntry struct {
	start, end uint64
	name       string
}

// readPerfMap reads the map at path; a missing file is (nil, nil).
func readPerfMap(path string) (*perfMap, error) {
	f, err := os.Open(path)
	if os.IsNotExist(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	pm := &perfMap{path: path, size: st.Size(), modTime: st.ModTime()}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 4096), 1<<20)
	for sc.Scan() {
		e, ok := parsePerfMapLine(sc.Bytes())
		if ok {
			pm.entries = append(pm.entries, e)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
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
	return pm, nil
}

func parsePerfMapLine(b []byte) (perfEntry, bool) {
	b = bytes.TrimSpace(b)
	a, rest, ok := bytes.Cut(b, []byte{' '})
	if !ok {
		return perfEntry{}, false
	}
	sz, name, ok := bytes.Cut(bytes.TrimLeft(rest, " "), []byte{' '})
	if !ok {
		return perfEntry{}, false
	}
	start, err1 := strconv.ParseUint(strings.TrimPrefix(string(a), "0x"), 16, 64)
	size, err2 := strconv.ParseUint(strings.TrimPrefix(string(sz), "0x"), 16, 64)
	if err1 != nil || err2 != nil || size == 0 {
		return perfEntry{}, false
	}
	return perfEntry{start: start, end: start + size, name: string(bytes.TrimSpace(name))}, true
}

// changed reports whether the file on disk differs from what was read.
func (pm *perfMap) changed() bool {
	st, err := os.Stat(pm.path)
	return err == nil && (st.Size() != pm.size || !st.ModTime().Equal(pm.modTime))
}

func (pm *perfMap) lookup(addr uint64) (perfEntry, bool) {
	i := sort.Search(len(pm.entries), func(i int) bool { return pm.entries[i].start > addr }) - 1
	if i < 0 || addr >= pm.entries[i].end {
		return perfEntry{}, false
	}
	return pm.entries[i], true
}
