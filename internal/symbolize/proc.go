package symbolize

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
)

// A procKey tells one exec of a process from another. The PID and start
// time stay the same across execve, so the key adds the addresses of the
// new image's code and stack, which change on every exec (ASLR) and never
// otherwise. Reading them needs ptrace read access (root has it); without
// it the kernel shows zeros and the key falls back to the start time.
type procKey struct {
	startTime  uint64
	startCode  uint64
	startStack uint64
}

// readProcKey reads the key from /proc/PID/stat. The collector calls it
// for every overrun record, so it reads into a buffer on the stack.
func readProcKey(procRoot string, pid uint32) (procKey, error) {
	f, err := os.Open(procRoot + "/" + strconv.FormatUint(uint64(pid), 10) + "/stat")
	if err != nil {
		return procKey{}, err
	}
	defer f.Close()
	var buf [1024]byte
	n, err := io.ReadFull(f, buf[:])
	if err != nil && !errors.Is(err, io.ErrUnexpectedEOF) {
		return procKey{}, err
	}
	return parseStat(buf[:n])
}

// parseStat parses /proc/PID/stat. The command name, field 2, may hold
// spaces and parentheses, so the fields are counted from the last ')'.
func parseStat(b []byte) (procKey, error) {
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return procKey{}, fmt.Errorf("parse stat: no command name")
	}
	// Fields are counted from 3 (state), the first after the name.
	var k procKey
	field, rest := 3, b[i+1:]
	for field <= 28 {
		rest = bytes.TrimLeft(rest, " ")
		end := bytes.IndexByte(rest, ' ')
		if end < 0 {
			end = len(rest)
		}
		if end == 0 {
			return procKey{}, fmt.Errorf("parse stat: %d fields after the command name, want at least 26", field-3)
		}
		var dst *uint64
		switch field {
		case 22:
			dst = &k.startTime
		case 26:
			dst = &k.startCode
		case 28:
			dst = &k.startStack
		}
		if dst != nil {
			v, err := strconv.ParseUint(string(bytes.TrimSpace(rest[:end])), 10, 64)
			if err != nil {
				return procKey{}, fmt.Errorf("parse stat field %d: %w", field, err)
			}
			*dst = v
		}
		rest = rest[end:]
		field++
	}
	return k, nil
}

// A mapRegion is one line of /proc/PID/maps.
type mapRegion struct {
	start, end uint64
	offset     uint64
	exec       bool
	dev        uint64 // major<<32 | minor, as maps shows it
	inode      uint64
	path       string // empty for anonymous memory
}

// parseMaps parses /proc/PID/maps, keeping only executable regions: user
// stack addresses point into code. JIT code lives in anonymous executable
// regions, which are kept too.
func parseMaps(b []byte) ([]mapRegion, error) {
	var out []mapRegion
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 0, 4096), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		// 7f1c2a000000-7f1c2a022000 r-xp 00002000 fe:00 247026   /usr/lib/x.so
		var r mapRegion
		fields := strings.SplitN(line, " ", 6)
		if len(fields) < 5 {
			return nil, fmt.Errorf("parse maps line %q: too few fields", line)
		}
		if len(fields[1]) < 3 || fields[1][2] != 'x' {
			continue
		}
		r.exec = true
		lo, hi, ok := strings.Cut(fields[0], "-")
		if !ok {
			return nil, fmt.Errorf("parse maps line %q: bad range", line)
		}
		var err error
		if r.start, err = strconv.ParseUint(lo, 16, 64); err != nil {
			return nil, fmt.Errorf("parse maps line %q: %w", line, err)
		}
		if r.end, err = strconv.ParseUint(hi, 16, 64); err != nil {
			return nil, fmt.Errorf("parse maps line %q: %w", line, err)
		}
		if r.offset, err = strconv.ParseUint(fields[2], 16, 64); err != nil {
			return nil, fmt.Errorf("parse maps line %q: %w", line, err)
		}
		maj, min, ok := strings.Cut(fields[3], ":")
		if !ok {
			return nil, fmt.Errorf("parse maps line %q: bad device", line)
		}
		ma, err1 := strconv.ParseUint(maj, 16, 32)
		mi, err2 := strconv.ParseUint(min, 16, 32)
		if err1 != nil || err2 != nil {
			return nil, fmt.Errorf("parse maps line %q: bad device", line)
		}
		r.dev = ma<<32 | mi
		if r.inode, err = strconv.ParseUint(fields[4], 10, 64); err != nil {
			return nil, fmt.Errorf("parse maps line %q: %w", line, err)
		}
		if len(fields) == 6 {
			r.path = strings.TrimLeft(fields[5], " ")
		}
		out = append(out, r)
	}
	return out, sc.Err()
}

// parseNSPid returns the PID the process has in its own PID namespace (the
// last NSpid entry of /proc/PID/status): a JIT inside a container names its
// perf map after that PID, not the host's. It returns pid when status has
// none.
func parseNSPid(status []byte, pid uint32) uint32 {
	for line := range strings.SplitSeq(string(status), "\n") {
		rest, ok := strings.CutPrefix(line, "NSpid:")
		if !ok {
			continue
		}
		f := strings.Fields(rest)
		if len(f) == 0 {
			break
		}
		n, err := strconv.ParseUint(f[len(f)-1], 10, 32)
		if err != nil {
			break
		}
		return uint32(n)
	}
	return pid
}
