package elfread

import (
	"debug/dwarf"
	"debug/elf"
	"encoding/binary"
	"errors"
	"fmt"
)

// ErrNoDWARF is returned by DWARF for a file without .debug_info.
var ErrNoDWARF = errors.New("no DWARF data")

// dwarfSections are what line tables need: the units and their
// attributes (info, abbrev, strings, DWARF 5's string offsets and line
// strings) and the line programs. Frames, ranges and names are not read.
var dwarfSections = []string{"info", "abbrev", "line", "str", "line_str", "str_offsets"}

// DWARF reads the sections line tables need, each read (and inflated) up
// to max bytes, with .debug_info cut after the last whole unit that fits:
// the units past a cap are left out, not the file. view maps sections
// stored as they are (nil: read them). take is asked for each section's
// bytes read into memory (a memory budget; it counts its refusals): when
// it refuses, that section and the ones after it are left out, and so the
// units that need them.
// capped reports that something was left out.
func DWARF(f *elf.File, max int64, view func(off, size uint64) ([]byte, error), take func(n int64) bool) (d *dwarf.Data, capped bool, err error) {
	data := map[string][]byte{}
	for _, name := range dwarfSections {
		s := f.Section(".debug_" + name)
		if s == nil {
			s = f.Section(".zdebug_" + name)
		}
		if s == nil || s.Type == elf.SHT_NOBITS {
			continue
		}
		b, cut, err := ReadSection(s, max, view)
		if err != nil {
			return nil, false, fmt.Errorf("read %s: %w", s.Name, err)
		}
		stored := s.Flags&elf.SHF_COMPRESSED == 0 && s.Name[1] != 'z'
		if (!stored || view == nil) && !take(int64(len(b))) {
			// No room for it in memory: it and the sections after it
			// are left out (take counts why).
			capped = true
			break
		}
		if cut {
			capped = true
			if name == "info" {
				b = wholeUnits(b, f.ByteOrder)
			}
		}
		data[name] = b
	}
	if data["info"] == nil {
		return nil, capped, ErrNoDWARF
	}
	d, err = dwarf.New(data["abbrev"], nil, nil, data["info"], data["line"], nil, nil, data["str"])
	if err != nil {
		return nil, capped, err
	}
	for _, name := range []string{"line_str", "str_offsets"} {
		if b := data[name]; b != nil {
			if err := d.AddSection(".debug_"+name, b); err != nil {
				return nil, capped, err
			}
		}
	}
	return d, capped, nil
}

// wholeUnits cuts .debug_info after its last complete unit.
func wholeUnits(b []byte, bo binary.ByteOrder) []byte {
	off := uint64(0)
	for off+4 <= uint64(len(b)) {
		n, hdr := uint64(bo.Uint32(b[off:])), uint64(4)
		if n == 0xffffffff {
			if off+12 > uint64(len(b)) {
				break
			}
			n, hdr = bo.Uint64(b[off+4:]), 12
		} else if n >= 0xfffffff0 {
			break
		}
		next := off + hdr + n
		if next < off || next > uint64(len(b)) {
			break
		}
		off = next
	}
	return b[:off]
}
