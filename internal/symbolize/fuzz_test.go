package symbolize

import (
	"bytes"
	"os"
	"testing"
)

// FuzzParsers feeds the /proc and perf map parsers arbitrary bytes: they
// read files other processes control (a JIT's perf map) and must never
// panic.
func FuzzParsers(f *testing.F) {
	f.Add([]byte("4242 (a (b) c) S 1 4242 4242 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 987654 1000 200 18446744073709551615 94000000000000 94000000100000 140700000000000 0 0"))
	f.Add([]byte("55ff155d4000-55ff155d9000 r-xp 00002000 fe:00 247026                     /usr/bin/cat\n"))
	f.Add([]byte("7f0000001000 40 jit_alpha\n0x10 0x20 LazyCompile:*beta foo.js:12\n"))
	f.Add([]byte("ffffffff81000000 T _text\nffffffffc0001000 t ext4_thing\t[ext4]\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		parseStat(b)
		parseMaps(b)
		parseKallsyms(b)
		for line := range bytes.SplitSeq(b, []byte{'\n'}) {
			if e, ok := parsePerfMapLine(line); ok && e.end <= e.start {
				t.Errorf("perf map entry %+v from %q is empty", e, line)
			}
		}
	})
}

// FuzzModule loads arbitrary bytes as an ELF file and looks addresses up
// in it: a corrupt or hostile binary must give errors or unnamed frames,
// never a panic.
func FuzzModule(f *testing.F) {
	if exe, err := os.ReadFile("/proc/self/exe"); err == nil && len(exe) > 0 {
		// The head of a real Go binary: headers and the start of its
		// tables, truncated.
		f.Add(exe[:min(len(exe), 1<<16)])
	}
	f.Add([]byte("\x7fELF\x02\x01\x01\x00"))
	f.Fuzz(func(t *testing.T, b []byte) {
		m := &module{name: "fuzz", path: "fuzz", r: bytes.NewReader(b)}
		if err := m.load(); err != nil {
			return
		}
		for _, addr := range []uint64{0, 0x401000, 0x1000, ^uint64(0)} {
			if res := m.lookup(addr); len(res) == 0 {
				t.Errorf("lookup(%#x) returned no result", addr)
			}
		}
	})
}
