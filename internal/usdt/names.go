package usdt

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strconv"
	"sync"

	"github.com/spanwatch/spanwatch/internal/userfile"
	"github.com/spanwatch/spanwatch/snapshot"
)

// UnreadableName names the spans whose name argument could be read neither
// by the BPF program nor through /proc/PID/mem (a bad pointer, or a process
// gone before the collector looked).
const UnreadableName = "(unreadable name)"

// placeholderLen is the length of "(name@" + 16 hex + "." + 8 hex + ")",
// the name usdt_name_unread() in bpf/usdt.bpf.c gives a span whose name it
// could not read.
const placeholderLen = 6 + 16 + 1 + 8 + 1

// ParsePlaceholder reports whether name is such a placeholder, and the
// process and address it stands for.
func ParsePlaceholder(name string) (tgid uint32, addr uint64, ok bool) {
	if len(name) != placeholderLen || name[:6] != "(name@" || name[22] != '.' || name[31] != ')' {
		return 0, 0, false
	}
	a, err1 := strconv.ParseUint(name[6:22], 16, 64)
	p, err2 := strconv.ParseUint(name[23:31], 16, 32)
	if err1 != nil || err2 != nil {
		return 0, 0, false
	}
	return uint32(p), a, true
}

// nameKey identifies a string in a process: by the file it was mapped from
// and its offset there when the address is in a file mapping (so every
// process of a binary shares one read), else by process and address.
type nameKey struct {
	dev    string
	ino    uint64
	offset uint64
	tgid   uint32
	addr   uint64
}

// nameReader reads strings the BPF programs could not, through
// /proc/PID/mem (which faults pages in as the process itself would), and
// remembers them by binary and address.
type nameReader struct {
	procRoot string
	log      func(msg string, args ...any)

	mu       sync.Mutex
	byKey    map[nameKey]string
	byPlace  map[[2]uint64]string // {tgid, addr} -> name
	warned   bool
	failures uint64
}

func newNameReader(procRoot string, log func(msg string, args ...any)) *nameReader {
	return &nameReader{procRoot: procRoot, log: log, byKey: map[nameKey]string{}, byPlace: map[[2]uint64]string{}}
}

// maxNameCache bounds the remembered names; past it the cache starts over.
const maxNameCache = 1 << 16

// resolve returns the name at addr in process tgid, UnreadableName when
// it cannot be read (logged once per reader, counted).
func (r *nameReader) resolve(tgid uint32, addr uint64) string {
	place := [2]uint64{uint64(tgid), addr}
	r.mu.Lock()
	if n, ok := r.byPlace[place]; ok {
		r.mu.Unlock()
		return n
	}
	r.mu.Unlock()
	key := r.keyOf(tgid, addr)
	r.mu.Lock()
	n, ok := r.byKey[key]
	r.mu.Unlock()
	if !ok {
		var err error
		n, err = r.read(tgid, addr)
		if err != nil {
			n = UnreadableName
			r.mu.Lock()
			r.failures++
			first := !r.warned
			r.warned = true
			r.mu.Unlock()
			if first {
				r.log("usdt_name_unreadable", "pid", tgid, "addr", fmt.Sprintf("%#x", addr), "error", err, "name", UnreadableName)
			}
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.byPlace) >= maxNameCache {
		r.byPlace = map[[2]uint64]string{}
		r.byKey = map[nameKey]string{}
	}
	r.byPlace[place] = n
	if n != UnreadableName {
		r.byKey[key] = n
	}
	return n
}

// keyOf finds the file mapping addr falls in.
func (r *nameReader) keyOf(tgid uint32, addr uint64) nameKey {
	maps, err := ReadMaps(r.procRoot, int(tgid))
	if err == nil {
		for _, m := range maps {
			if addr >= m.Start && addr < m.End {
				return nameKey{dev: m.Dev, ino: m.Inode, offset: m.Offset + addr - m.Start}
			}
		}
	}
	return nameKey{tgid: tgid, addr: addr}
}

// read reads a NUL-terminated string of at most snapshot.NameLen bytes,
// cut the way the kernel cuts names.
func (r *nameReader) read(tgid uint32, addr uint64) (string, error) {
	if addr == 0 {
		return "", errors.New("null pointer")
	}
	// A name may point into a mapping of a FUSE file whose daemon never
	// answers: the read is bounded (userfile.ReadProcAt).
	buf, err := userfile.ReadProcAt(context.Background(), userfile.OnPID(r.procRoot, int(tgid)),
		filepath.Join(r.procRoot, strconv.Itoa(int(tgid)), "mem"), int64(addr), snapshot.NameLen)
	if err != nil {
		return "", fmt.Errorf("read pid %d memory at %#x: %w", tgid, addr, err)
	}
	n := len(buf)
	if i := bytes.IndexByte(buf, 0); i >= 0 {
		buf = buf[:i]
	} else if n < snapshot.NameLen {
		// The string runs into memory that cannot be read.
		return "", fmt.Errorf("read pid %d memory at %#x: string not terminated within %d readable bytes", tgid, addr, n)
	}
	return snapshot.TruncateName(string(buf)), nil
}

// Failures returns how many names could not be read.
func (r *nameReader) Failures() uint64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.failures
}
