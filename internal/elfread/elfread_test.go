package elfread

import (
	"debug/elf"
	"encoding/binary"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"testing"

	"github.com/spanwatch/spanwatch/internal/elfbuild"
	"github.com/spanwatch/spanwatch/internal/userfile"
)

// allocated returns the bytes fn allocated on the heap.
func allocated(fn func()) uint64 {
	var a, b runtime.MemStats
	runtime.ReadMemStats(&a)
	fn()
	runtime.ReadMemStats(&b)
	return b.TotalAlloc - a.TotalAlloc
}

func TestNewFileHeaderCaps(t *testing.T) {
	sym, str := elfbuild.Symbols(0x401000, "main")
	good := elfbuild.Build(
		elfbuild.Section{Name: ".symtab", Type: elf.SHT_SYMTAB, Data: sym, Link: 2, Entsize: 24},
		elfbuild.Section{Name: ".strtab", Type: elf.SHT_STRTAB, Data: str},
	)
	if _, err := NewFile(good); err != nil {
		t.Fatalf("NewFile(a good file): %v", err)
	}
	hdr := good.Extents[0].Data
	shoff := binary.LittleEndian.Uint64(hdr[0x28:])
	shstrndx := binary.LittleEndian.Uint16(hdr[0x3e:])
	for _, tc := range []struct {
		name  string
		patch func(h []byte)
	}{
		{"a 4 GiB section name table", func(h []byte) {
			binary.LittleEndian.PutUint64(h[shoff+uint64(shstrndx)*64+0x20:], 4<<30)
		}},
		{"16M sections by extended numbering", func(h []byte) {
			binary.LittleEndian.PutUint16(h[0x3c:], 0)
			binary.LittleEndian.PutUint64(h[shoff+0x20:], 16<<20)
		}},
		{"a compressed section name table", func(h []byte) {
			at := shoff + uint64(shstrndx)*64 + 0x08
			binary.LittleEndian.PutUint64(h[at:], uint64(elf.SHF_COMPRESSED))
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			bad := *good
			bad.Extents = append([]elfbuild.Extent(nil), good.Extents...)
			h := append([]byte(nil), hdr...)
			tc.patch(h)
			bad.Extents[0].Data = h
			bad.Len = 8 << 30
			before := userfile.Counts()[userfile.ReasonHeaders]
			var err error
			if n := allocated(func() { _, err = NewFile(&bad) }); n > 1<<20 {
				t.Errorf("NewFile allocated %d bytes", n)
			}
			if !errors.Is(err, ErrHeaders) {
				t.Errorf("NewFile: %v, want ErrHeaders", err)
			}
			if userfile.Counts()[userfile.ReasonHeaders] <= before {
				t.Error("the cap was not counted")
			}
		})
	}
}

// TestSymbolsSparse reads a 128 MiB symbol table that is a hole (the
// issue's 20 KB binary): memory stays one chunk, and the cap stops it.
func TestSymbolsSparse(t *testing.T) {
	sym, str := elfbuild.Symbols(0x401000, "alpha", "beta", "gamma")
	f := elfbuild.Build(
		elfbuild.Section{Name: ".symtab", Type: elf.SHT_SYMTAB, Data: sym, Size: 128 << 20, Link: 2, Entsize: 24},
		elfbuild.Section{Name: ".strtab", Type: elf.SHT_STRTAB, Data: str},
	)
	ef, err := NewFile(f)
	if err != nil {
		t.Fatal(err)
	}
	table := Table(ef, elf.SHT_SYMTAB)
	strtab, _, err := ReadSection(StringTable(ef, table), 1<<20, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	entries := 0
	var capped bool
	n := allocated(func() {
		capped, err = Symbols(ef, table, 8<<20, func(s Symbol) bool {
			entries++
			if s.Type() == elf.STT_FUNC {
				names = append(names, Name(strtab, s.Name))
			}
			return true
		})
	})
	if err != nil || !capped {
		t.Fatalf("Symbols: capped %v, %v; want capped at 8 MiB", capped, err)
	}
	if want := 8<<20/24 - 1; entries != want {
		t.Errorf("%d entries seen, want %d (8 MiB of entries, less the null one)", entries, want)
	}
	if len(names) != 3 || names[0] != "alpha" || names[2] != "gamma" {
		t.Errorf("functions %q", names)
	}
	if n > 1<<20 {
		t.Errorf("Symbols allocated %d bytes over an 8 MiB table", n)
	}
	// Stopping early reads no further.
	entries = 0
	Symbols(ef, table, 8<<20, func(s Symbol) bool { entries++; return entries < 2 })
	if entries != 2 {
		t.Errorf("fn returned false at 2, %d seen", entries)
	}
	if !NameIs(strtab, 1, "alpha") || NameIs(strtab, 1, "alph") || NameIs(strtab, 1<<30, "x") {
		t.Error("NameIs")
	}
}

// TestReadSectionBomb inflates a compressed section that claims 1 GiB up
// to its cap only.
func TestReadSectionBomb(t *testing.T) {
	bomb := elfbuild.Zlib(1<<30, 256<<20)
	f := elfbuild.Build(elfbuild.Section{Name: ".debug_info", Type: elf.SHT_PROGBITS, Flags: elf.SHF_COMPRESSED, Data: bomb})
	ef, err := NewFile(f)
	if err != nil {
		t.Fatal(err)
	}
	before := userfile.Counts()[userfile.ReasonDecompressed]
	var b []byte
	var truncated bool
	n := allocated(func() { b, truncated, err = ReadSection(ef.Section(".debug_info"), 16<<20, nil, nil) })
	if err != nil || !truncated || len(b) != 16<<20 {
		t.Fatalf("ReadSection: %d bytes, truncated %v, %v", len(b), truncated, err)
	}
	if n > 48<<20 {
		t.Errorf("ReadSection allocated %d bytes for a 16 MiB cap", n)
	}
	if userfile.Counts()[userfile.ReasonDecompressed] <= before {
		t.Error("the cap was not counted")
	}
	// Stored sections come from the view when there is one.
	var viewed [2]uint64
	view := func(off, size uint64) ([]byte, error) { viewed = [2]uint64{off, size}; return make([]byte, size), nil }
	g := elfbuild.Build(elfbuild.Section{Name: ".data", Type: elf.SHT_PROGBITS, Size: 64 << 20})
	eg, err := NewFile(g)
	if err != nil {
		t.Fatal(err)
	}
	b, truncated, err = ReadSection(eg.Section(".data"), 1<<20, view, nil)
	if err != nil || !truncated || len(b) != 1<<20 || viewed[1] != 1<<20 || viewed[0] != eg.Section(".data").Offset {
		t.Errorf("ReadSection with a view: %d bytes, truncated %v, view %v, %v", len(b), truncated, viewed, err)
	}
}

// TestDWARF reads the line tables of a C program with two compilation
// units, whole, then with .debug_info cut to its first unit.
func TestDWARF(t *testing.T) {
	cc, err := exec.LookPath("cc")
	if err != nil {
		t.Skipf("skipping: no C compiler: %v", err)
	}
	dir := t.TempDir()
	for name, src := range map[string]string{
		"a.c": "int b(int);\nint main(void) { return b(1); }\n",
		"b.c": "int b(int x) {\n  return x + 1;\n}\n",
	} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	bin := filepath.Join(dir, "prog")
	if out, err := exec.Command(cc, "-g", "-O0", "-o", bin, filepath.Join(dir, "a.c"), filepath.Join(dir, "b.c")).CombinedOutput(); err != nil {
		t.Fatalf("cc: %v\n%s", err, out)
	}
	fh, err := os.Open(bin)
	if err != nil {
		t.Fatal(err)
	}
	defer fh.Close()
	ef, err := NewFile(fh)
	if err != nil {
		t.Fatal(err)
	}
	units := func(max int64) (int, bool) {
		d, capped, err := DWARF(ef, max, nil, func(n int64) int64 { return n })
		if err != nil {
			t.Fatalf("DWARF(max %d): %v", max, err)
		}
		n := 0
		for r := d.Reader(); ; {
			e, err := r.Next()
			if err != nil || e == nil {
				break
			}
			if lr, err := d.LineReader(e); err == nil && lr != nil {
				n++
			}
			r.SkipChildren()
		}
		return n, capped
	}
	if n, capped := units(1 << 30); n != 2 || capped {
		t.Errorf("whole: %d units with line tables, capped %v; want 2", n, capped)
	}
	info := ef.Section(".debug_info")
	first := int64(binary.LittleEndian.Uint32(mustData(t, info))) + 4
	if first >= int64(info.Size) {
		t.Fatalf("first unit %d bytes of %d", first, info.Size)
	}
	if n, capped := units(first + 1); n != 1 || !capped {
		t.Errorf("cut after the first unit: %d units, capped %v; want 1", n, capped)
	}
	// No room in memory: left out, not an error.
	if _, capped, err := DWARF(ef, 1<<30, nil, func(int64) int64 { return 0 }); !capped || !errors.Is(err, ErrNoDWARF) {
		t.Errorf("no room: capped %v, %v; want capped, ErrNoDWARF", capped, err)
	}
}

func mustData(t *testing.T, s *elf.Section) []byte {
	b, err := s.Data()
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestWholeUnits cuts .debug_info after whole units, zero-length ones
// skipped (as debug/dwarf skips them), and after the unit cap.
func TestWholeUnits(t *testing.T) {
	le := binary.LittleEndian
	var b []byte
	for i := 0; i < 10; i++ {
		b = le.AppendUint32(b, 3)
		b = append(b, 1, 2, 3)
		b = le.AppendUint32(b, 0) // empty: not a unit
	}
	whole := len(b)
	b = le.AppendUint32(b, 100) // cut short
	b = append(b, 1, 2)
	got, more := wholeUnits(b, le, 100)
	if len(got) != whole || more {
		t.Errorf("wholeUnits = %d bytes, more %v; want %d, false", len(got), more, whole)
	}
	before := userfile.Counts()[userfile.ReasonUnits]
	got, more = wholeUnits(b, le, 4)
	if len(got) != 4*(7+4) || !more {
		t.Errorf("4 units: %d bytes, more %v; want %d, true", len(got), more, 4*(7+4))
	}
	if userfile.Counts()[userfile.ReasonUnits] <= before {
		t.Error("the unit cap was not counted")
	}
}
