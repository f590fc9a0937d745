package usdt

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/spanwatch/spanwatch/internal/userfile"
)

// A Mapping is one file-backed line of /proc/PID/maps.
type Mapping struct {
	Start, End uint64
	Perms      string
	Offset     uint64
	Dev        string // "maj:min" in hex, as the kernel writes it
	Inode      uint64
	Path       string // as the process sees it (its mount namespace)
}

// maxMapsLines bounds the lines read from one /proc/PID/maps.
const maxMapsLines = 1 << 20

// maxMapsBytes bounds what is read of one /proc/PID/maps.
const maxMapsBytes = 64 << 20

// ReadMaps reads the file-backed mappings of process pid from
// procRoot/PID/maps (procRoot is normally "/proc"). The read is bounded in
// time (userfile.ReadProc): it waits for the process's mmap lock, which a
// process stuck in a page fault on a FUSE file may hold indefinitely.
func ReadMaps(procRoot string, pid int) ([]Mapping, error) {
	b, err := userfile.ReadProc(context.Background(), userfile.OnPID(procRoot, pid), filepath.Join(procRoot, strconv.Itoa(pid), "maps"), maxMapsBytes)
	if err != nil {
		return nil, fmt.Errorf("read mappings of pid %d: %w", pid, err)
	}
	var out []Mapping
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for n := 0; sc.Scan(); n++ {
		if n >= maxMapsLines {
			return nil, fmt.Errorf("read mappings of pid %d: more than %d lines", pid, maxMapsLines)
		}
		m, ok := parseMapsLine(sc.Text())
		if ok {
			out = append(out, m)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("read mappings of pid %d: %w", pid, err)
	}
	return out, nil
}

// parseMapsLine parses "start-end perms offset dev inode path"; it reports
// false for anonymous and special mappings ([heap], [vdso], deleted files).
func parseMapsLine(line string) (Mapping, bool) {
	f := strings.Fields(line)
	if len(f) < 6 {
		return Mapping{}, false
	}
	path := strings.Join(f[5:], " ")
	if !strings.HasPrefix(path, "/") || strings.HasSuffix(path, " (deleted)") {
		return Mapping{}, false
	}
	se := strings.SplitN(f[0], "-", 2)
	if len(se) != 2 {
		return Mapping{}, false
	}
	start, err1 := strconv.ParseUint(se[0], 16, 64)
	end, err2 := strconv.ParseUint(se[1], 16, 64)
	off, err3 := strconv.ParseUint(f[2], 16, 64)
	ino, err4 := strconv.ParseUint(f[4], 10, 64)
	if err1 != nil || err2 != nil || err3 != nil || err4 != nil || ino == 0 {
		return Mapping{}, false
	}
	return Mapping{Start: start, End: end, Perms: f[1], Offset: off, Dev: f[3], Inode: ino, Path: path}, true
}

// ProcessFiles returns the executable of process pid and every file it has
// mapped executable (its shared libraries), as paths spanwatch can open from
// its own mount namespace: through procRoot/PID/root.
func ProcessFiles(procRoot string, pid int) ([]string, error) {
	maps, err := ReadMaps(procRoot, pid)
	if err != nil {
		return nil, err
	}
	root := filepath.Join(procRoot, strconv.Itoa(pid), "root")
	seen := map[string]bool{}
	var out []string
	for _, m := range maps {
		if !strings.Contains(m.Perms, "x") || seen[m.Path] {
			continue
		}
		seen[m.Path] = true
		out = append(out, root+m.Path)
	}
	return out, nil
}

// runtimeAddress returns where file offset off of file f is mapped in
// process pid, matching the file by device and inode.
func runtimeAddress(procRoot string, pid int, f *File, off uint64) (uint64, error) {
	st := devIno{dev: f.dev, ino: f.ino}
	path := f.Path
	maps, err := ReadMaps(procRoot, pid)
	if err != nil {
		return 0, err
	}
	for _, m := range maps {
		if m.Inode != st.ino || !sameDev(m.Dev, st.dev) {
			continue
		}
		if off >= m.Offset && off-m.Offset < m.End-m.Start {
			return m.Start + (off - m.Offset), nil
		}
	}
	return 0, fmt.Errorf("offset %#x of %s is not mapped in pid %d", off, path, pid)
}

// sameDev compares /proc/PID/maps' "maj:min" (hex) with a stat device number.
func sameDev(s string, dev uint64) bool {
	mm := strings.SplitN(s, ":", 2)
	if len(mm) != 2 {
		return false
	}
	maj, err1 := strconv.ParseUint(mm[0], 16, 32)
	min, err2 := strconv.ParseUint(mm[1], 16, 32)
	if err1 != nil || err2 != nil {
		return false
	}
	return maj == devMajor(dev) && min == devMinor(dev)
}

// Linux's encoding of dev_t (glibc's gnu_dev_major/minor).
func devMajor(dev uint64) uint64 { return ((dev >> 8) & 0xfff) | ((dev >> 32) &^ 0xfff) }
func devMinor(dev uint64) uint64 { return (dev & 0xff) | ((dev >> 12) &^ 0xff) }
