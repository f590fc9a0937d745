package boltcheck

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"math/bits"
	"strings"
)

// The on-disk layout (bbolt's internal/common).
const (
	pageHeaderSize = 16 // id u64, flags u16, count u16, overflow u32
	elemSize       = 16 // branch: pos u32, ksize u32, pgid u64; leaf: flags, pos, ksize, vsize u32
	metaSize       = 64 // magic, version, pageSize, flags u32; root, seq, freelist, pgid, txid, checksum u64
	bucketHeader   = 16 // root u64, sequence u64

	flagBranch   = 0x01
	flagLeaf     = 0x02
	flagMeta     = 0x04
	flagFreelist = 0x10

	leafBucket = 0x01

	magic         = 0xED0CDAED
	version       = 2
	noFreelist    = ^uint64(0)
	maxDepth      = 64      // far beyond any real tree
	maxPageSize   = 1 << 24 // as bbolt probes
	minPageSize   = 512
	maxReportLen  = 20
	maxPageBuffer = 1 << 30 // a page with its overflow
)

var le = binary.LittleEndian

// ErrDamaged is wrapped by Check's error.
var ErrDamaged = errors.New("bbolt file damaged")

// A DamageError lists what Check found wrong, the first problems first.
type DamageError struct {
	Problems []string
	More     int // problems found beyond those listed
}

func (e *DamageError) Error() string {
	s := strings.Join(e.Problems, "; ")
	if e.More > 0 {
		s += fmt.Sprintf("; and %d more", e.More)
	}
	return "bbolt file damaged: " + s
}

func (e *DamageError) Unwrap() error { return ErrDamaged }

type meta struct {
	pageSize uint32
	root     uint64
	rootSeq  uint64
	freelist uint64
	hwm      uint64 // pages in use: ids 0..hwm-1
	txid     uint64
}

// parseMeta decodes and validates the meta at b (after its page header),
// as bbolt's Meta.Validate does.
func parseMeta(b []byte) (meta, bool) {
	if len(b) < metaSize {
		return meta{}, false
	}
	if le.Uint32(b[0:]) != magic || le.Uint32(b[4:]) != version {
		return meta{}, false
	}
	h := fnv.New64a()
	h.Write(b[:56])
	if h.Sum64() != le.Uint64(b[56:]) {
		return meta{}, false
	}
	return meta{pageSize: le.Uint32(b[8:]), root: le.Uint64(b[16:]), rootSeq: le.Uint64(b[24:]),
		freelist: le.Uint64(b[32:]), hwm: le.Uint64(b[40:]), txid: le.Uint64(b[48:])}, true
}

// file is a bbolt file being read.
type file struct {
	r        io.ReaderAt
	size     int64
	ps       int64
	m        meta
	visited  []bool // by page id: reached from a tree, the freelist or meta
	problems []string
	more     int
	strict   bool // Check: stop at the first problem of a subtree too
	records  int
	emit     func(path [][]byte, k, v []byte)
	bufs     [][]byte // by tree depth: a page is read into its depth's buffer
}

func (f *file) problem(format string, a ...any) {
	if len(f.problems) < maxReportLen {
		f.problems = append(f.problems, fmt.Sprintf(format, a...))
	} else {
		f.more++
	}
}

// metas reads both meta pages and returns them as bbolt would choose: the
// valid one with the higher txid first. The page size comes from the first
// meta page, else from the second, found at each possible page size.
func metas(r io.ReaderAt, size int64) (chosen, other *meta, ps int64, err error) {
	var buf [pageHeaderSize + metaSize]byte
	read := func(off int64) (meta, bool) {
		if off+int64(len(buf)) > size {
			return meta{}, false
		}
		if _, err := r.ReadAt(buf[:], off); err != nil {
			return meta{}, false
		}
		if le.Uint16(buf[8:]) != flagMeta {
			return meta{}, false
		}
		return parseMeta(buf[pageHeaderSize:])
	}
	m0, ok0 := read(0)
	switch {
	case ok0:
		ps = int64(m0.pageSize)
	default:
		for i := 0; i <= 14; i++ {
			pos := int64(1024) << i
			if pos >= size-1024 {
				break
			}
			if m, ok := read(pos); ok && int64(m.pageSize) == pos {
				ps = pos
				break
			}
		}
	}
	if ps < minPageSize || ps > maxPageSize || bits.OnesCount64(uint64(ps)) != 1 {
		return nil, nil, 0, fmt.Errorf("no valid meta page (page size %d)", ps)
	}
	m1, ok1 := read(ps)
	var a, b *meta
	if ok0 && int64(m0.pageSize) == ps {
		a = &m0
	}
	if ok1 && int64(m1.pageSize) == ps {
		b = &m1
	}
	switch {
	case a == nil && b == nil:
		return nil, nil, ps, errors.New("no valid meta page")
	case a == nil:
		return b, nil, ps, nil
	case b == nil:
		return a, nil, ps, nil
	case b.txid > a.txid:
		return b, a, ps, nil
	}
	return a, b, ps, nil
}

// Check verifies a bbolt file of size bytes, read through r: nil when
// bbolt can open it and read every page without going outside the page or
// the file, and the file is consistent the way Tx.Check wants it. An empty
// file (size 0) is one bbolt initializes: nil. Otherwise the error is a
// *DamageError (errors.Is ErrDamaged) or a read error.
func Check(r io.ReaderAt, size int64) error {
	if size == 0 {
		return nil
	}
	chosen, _, ps, err := metas(r, size)
	if err != nil {
		return &DamageError{Problems: []string{err.Error()}}
	}
	f := &file{r: r, size: size, ps: ps, m: *chosen, strict: true}
	if err := f.guard(); err != nil {
		return err
	}
	if len(f.problems) > 0 {
		return &DamageError{Problems: f.problems, More: f.more}
	}
	return nil
}

// Report is what Salvage read.
type Report struct {
	// Records is how many key/value pairs were handed out.
	Records int
	// Problems lists the damage skipped (the first of them; More counts
	// the rest).
	Problems []string
	More     int
}

// Salvage walks a bbolt file, damaged or not, and calls fn for every
// record (a key and value that is not a bucket) it can read, with the
// names of the buckets it is in, outermost first. Pages it cannot read are
// skipped and reported. The slices passed to fn are not reused. It walks
// the tree of the newest valid meta page, and the other's too when the
// newest yields nothing.
func Salvage(r io.ReaderAt, size int64, fn func(buckets [][]byte, key, value []byte)) Report {
	if size == 0 {
		return Report{}
	}
	chosen, other, ps, err := metas(r, size)
	if err != nil {
		return Report{Problems: []string{err.Error()}}
	}
	var rep Report
	for _, m := range []*meta{chosen, other} {
		if m == nil {
			continue
		}
		f := &file{r: r, size: size, ps: ps, m: *m, emit: fn}
		if err := f.guard(); err != nil {
			f.problems = append(f.problems, err.Error())
		}
		rep.Records += f.records
		rep.Problems = append(rep.Problems, f.problems...)
		rep.More += f.more
		if f.records > 0 {
			break
		}
	}
	if len(rep.Problems) > maxReportLen {
		rep.More += len(rep.Problems) - maxReportLen
		rep.Problems = rep.Problems[:maxReportLen]
	}
	return rep
}

// guard runs walkAll and turns a bug of this package (an index out of
// range: every access is a bounds-checked slice, never a pointer) into a
// problem: a file must never take the caller down.
func (f *file) guard() (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = &DamageError{Problems: append(f.problems, fmt.Sprintf("reader fault: %v", r))}
		}
	}()
	f.walkAll()
	return nil
}

// walkAll checks the meta's bounds, the freelist and the tree, and then
// that every page is accounted for.
func (f *file) walkAll() {
	m := &f.m
	if m.hwm < 2 || m.hwm > uint64(f.size/f.ps) {
		f.problem("high-water mark %d pages, but the file holds %d pages of %d bytes", m.hwm, f.size/f.ps, f.ps)
		if m.hwm < 2 {
			return
		}
		m.hwm = uint64(f.size / f.ps) // salvage what the file holds
		if m.hwm < 2 {
			return
		}
	}
	f.visited = make([]bool, m.hwm)
	f.visited[0], f.visited[1] = true, true
	freed := map[uint64]bool{}
	if m.freelist != noFreelist {
		f.freelist(freed)
	}
	if m.root < 2 || m.root >= m.hwm {
		f.problem("root bucket page %d out of range 2..%d", m.root, m.hwm-1)
		return
	}
	f.tree(m.root, nil, nil, nil, nil, 0)
	if !f.strict || len(f.problems) > 0 {
		return // pages a damaged tree no longer reaches say nothing more
	}
	for id := uint64(2); id < m.hwm; id++ {
		switch {
		case f.visited[id] && freed[id] && id != m.freelist:
			f.problem("page %d: freed but in use", id)
		case !f.visited[id] && !freed[id]:
			f.problem("page %d: neither reachable nor freed", id)
		}
	}
}

// page reads page id and its overflow pages, checking its place in the
// file and marking the pages visited.
func (f *file) page(id uint64, what string, depth int) []byte {
	if id < 2 || id >= f.m.hwm {
		f.problem("%s page %d out of range 2..%d", what, id, f.m.hwm-1)
		return nil
	}
	var hdr [pageHeaderSize]byte
	if _, err := f.r.ReadAt(hdr[:], int64(id)*f.ps); err != nil {
		f.problem("%s page %d: %v", what, id, err)
		return nil
	}
	if got := le.Uint64(hdr[0:]); got != id {
		f.problem("%s page %d says it is page %d", what, id, got)
		return nil
	}
	overflow := uint64(le.Uint32(hdr[12:]))
	if id+overflow >= f.m.hwm || (overflow+1)*uint64(f.ps) > maxPageBuffer {
		f.problem("%s page %d: %d overflow pages run past the high-water mark %d", what, id, overflow, f.m.hwm)
		return nil
	}
	for p := id; p <= id+overflow; p++ {
		if f.visited[p] {
			f.problem("%s page %d: page %d reached twice", what, id, p)
			return nil
		}
	}
	for p := id; p <= id+overflow; p++ {
		f.visited[p] = true
	}
	for len(f.bufs) <= depth {
		f.bufs = append(f.bufs, nil)
	}
	n := int(int64(overflow+1) * f.ps)
	if cap(f.bufs[depth]) < n {
		f.bufs[depth] = make([]byte, n)
	}
	buf := f.bufs[depth][:n]
	if _, err := f.r.ReadAt(buf, int64(id)*f.ps); err != nil {
		f.problem("%s page %d: %v", what, id, err)
		return nil
	}
	return buf
}

func (f *file) freelist(freed map[uint64]bool) {
	buf := f.page(f.m.freelist, "freelist", 0)
	if buf == nil {
		return
	}
	if flags := le.Uint16(buf[8:]); flags != flagFreelist {
		f.problem("freelist page %d has flags %#x", f.m.freelist, flags)
		return
	}
	idx, count := 0, uint64(le.Uint16(buf[10:]))
	if count == 0xffff {
		if len(buf) < pageHeaderSize+8 {
			f.problem("freelist page %d: no room for its count", f.m.freelist)
			return
		}
		idx, count = 1, le.Uint64(buf[pageHeaderSize:])
	}
	if count > uint64(len(buf)) || pageHeaderSize+(uint64(idx)+count)*8 > uint64(len(buf)) {
		f.problem("freelist page %d: %d ids run past the page", f.m.freelist, count)
		return
	}
	for i := uint64(0); i < count; i++ {
		id := le.Uint64(buf[pageHeaderSize+(uint64(idx)+i)*8:])
		if id < 2 || id >= f.m.hwm {
			f.problem("freelist page %d: freed page %d out of range 2..%d", f.m.freelist, id, f.m.hwm-1)
			return
		}
		freed[id] = true
	}
}

// tree walks the B+tree rooted at page id (or, when id is 0, the inline
// page in inline) of the bucket at path; its keys must be in [lo, hi)
// (nil: unbounded).
func (f *file) tree(id uint64, inline []byte, path [][]byte, lo, hi []byte, depth int) {
	if depth > maxDepth {
		f.problem("bucket %q: tree deeper than %d", joinPath(path), maxDepth)
		return
	}
	buf, where := inline, "inline page"
	if buf == nil {
		buf = f.page(id, "tree", depth)
		if buf == nil {
			return
		}
		where = fmt.Sprintf("page %d", id)
	}
	if len(buf) < pageHeaderSize {
		f.problem("bucket %q: %s shorter than a page header", joinPath(path), where)
		return
	}
	flags, count := le.Uint16(buf[8:]), int(le.Uint16(buf[10:]))
	if flags != flagBranch && flags != flagLeaf {
		f.problem("bucket %q: %s has flags %#x, not a branch or leaf", joinPath(path), where, flags)
		return
	}
	if inline != nil && flags != flagLeaf {
		f.problem("bucket %q: inline page is not a leaf", joinPath(path))
		return
	}
	clamped := false
	if int64(pageHeaderSize)+int64(count)*elemSize > int64(len(buf)) {
		f.problem("bucket %q: %s has %d elements, past the end of the page", joinPath(path), where, count)
		if f.strict {
			return
		}
		// Salvage: the real elements come first; read those that fit,
		// up to the first that does not make sense.
		count, clamped = (len(buf)-pageHeaderSize)/elemSize, true
	}
	if flags == flagBranch && count == 0 {
		f.problem("bucket %q: branch %s is empty", joinPath(path), where)
		return
	}
	slice := func(elem, pos, n int64) ([]byte, bool) {
		start := elem + pos
		if pos < 0 || n < 0 || start > int64(len(buf)) || n > int64(len(buf))-start {
			return nil, false
		}
		return buf[start : start+n], true
	}
	var prev []byte
	type child struct {
		id     uint64
		lo, hi []byte
	}
	var children []child
	for i := 0; i < count; i++ {
		off := int64(pageHeaderSize + i*elemSize)
		var key, value []byte
		var ok bool
		var eflags uint32
		var cid uint64
		if flags == flagBranch {
			pos, ksize := int64(le.Uint32(buf[off:])), int64(le.Uint32(buf[off+4:]))
			cid = le.Uint64(buf[off+8:])
			key, ok = slice(off, pos, ksize)
		} else {
			eflags = le.Uint32(buf[off:])
			pos, ksize, vsize := int64(le.Uint32(buf[off+4:])), int64(le.Uint32(buf[off+8:])), int64(le.Uint32(buf[off+12:]))
			if key, ok = slice(off, pos, ksize); ok {
				value, ok = slice(off, pos+ksize, vsize)
			}
		}
		if !ok {
			if clamped {
				break
			}
			f.problem("bucket %q: %s element %d lies past the page", joinPath(path), where, i)
			if f.strict {
				return
			}
			continue
		}
		if (prev != nil && bytes.Compare(key, prev) <= 0) || (lo != nil && bytes.Compare(key, lo) < 0) || (hi != nil && bytes.Compare(key, hi) >= 0) {
			if clamped {
				break
			}
			f.problem("bucket %q: %s element %d: key out of order", joinPath(path), where, i)
			if f.strict {
				return
			}
			continue
		}
		prev = key
		if flags == flagBranch {
			children = append(children, child{id: cid, lo: key})
			continue
		}
		if eflags&leafBucket == 0 {
			f.records++
			if f.emit != nil {
				f.emit(clonePath(path), bytes.Clone(key), bytes.Clone(value))
			}
			continue
		}
		if len(value) < bucketHeader {
			f.problem("bucket %q: nested bucket %q has a short header", joinPath(path), key)
			if f.strict {
				return
			}
			continue
		}
		sub := append(clonePath(path), bytes.Clone(key))
		if root := le.Uint64(value); root != 0 {
			f.tree(root, nil, sub, nil, nil, depth+1)
		} else if len(value) < bucketHeader+pageHeaderSize {
			f.problem("bucket %q: inline bucket %q has no page", joinPath(path), key)
		} else {
			f.tree(0, value[bucketHeader:], sub, nil, nil, depth+1)
		}
		if f.strict && len(f.problems) > 0 {
			return
		}
	}
	for i := range children {
		c := children[i]
		if i+1 < len(children) {
			c.hi = children[i+1].lo
		} else {
			c.hi = hi
		}
		f.tree(c.id, nil, path, c.lo, c.hi, depth+1)
		if f.strict && len(f.problems) > 0 {
			return
		}
	}
}

func clonePath(p [][]byte) [][]byte { return append([][]byte(nil), p...) }

func joinPath(p [][]byte) string {
	parts := make([]string, len(p))
	for i, b := range p {
		parts[i] = string(b)
	}
	return strings.Join(parts, "/")
}
