package elfread

import (
	"debug/dwarf"
	"debug/elf"
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/spanwatch/spanwatch/internal/userfile"
)

// ErrNoDWARF is returned by DWARF for a file without .debug_info.
var ErrNoDWARF = errors.New("no DWARF data")

// dwarfSections are what line tables and functions' parameters need:
// the units and their attributes (info, abbrev, strings, DWARF 5's string
// offsets, line strings and addresses, which clang's low_pc is an index
// into) and the line programs. Frames, ranges and names are not read.
var dwarfSections = []string{"info", "abbrev", "line", "str", "line_str", "str_offsets", "addr"}

// DWARF reads the sections line tables need, each read (and inflated) up
// to max bytes, with .debug_info cut after the last whole unit that fits:
// the units past a cap (or past MaxUnits) are left out, not the file.
// view maps sections stored as they are (nil: read them). grant is asked
// for each section's bytes before they are read into memory (a memory
// budget; it counts its refusals) and may grant less (the section is cut
// there) or nothing: then that section and the ones after it are left out,
// and so the units that need them.
// capped reports that something was left out.
func DWARF(f *elf.File, max int64, view func(off, size uint64) ([]byte, error), grant func(n int64) int64) (d *dwarf.Data, capped bool, err error) {
	data := map[string][]byte{}
	for _, name := range dwarfSections {
		s := f.Section(".debug_" + name)
		if s == nil {
			s = f.Section(".zdebug_" + name)
		}
		if s == nil || s.Type == elf.SHT_NOBITS {
			continue
		}
		b, cut, err := ReadSection(s, max, view, grant)
		if errors.Is(err, ErrNoRoom) {
			// No room for it in memory: it and the sections after it
			// are left out (take counts why).
			capped = true
			break
		}
		if err != nil {
			return nil, false, fmt.Errorf("read %s: %w", s.Name, err)
		}
		if cut {
			capped = true
		}
		if name == "info" {
			var more bool
			if b, more = wholeUnits(b, f.ByteOrder, MaxUnits); more {
				capped = true
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
	for _, name := range []string{"line_str", "str_offsets", "addr"} {
		if b := data[name]; b != nil {
			if err := d.AddSection(".debug_"+name, b); err != nil {
				return nil, capped, err
			}
		}
	}
	return d, capped, nil
}

// MaxUnits bounds the units of .debug_info kept: debug/dwarf builds a value
// per unit, and 64 MiB of tiny units would be millions. Real programs have
// up to tens of thousands.
const MaxUnits = 1 << 17

// wholeUnits cuts .debug_info after its last complete unit, and after
// maxUnits units; more reports the units left out (counted under
// userfile.ReasonUnits).
func wholeUnits(b []byte, bo binary.ByteOrder, maxUnits int) (_ []byte, more bool) {
	off := uint64(0)
	for units := 0; off+4 <= uint64(len(b)); {
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
		if n > 0 {
			if units == maxUnits {
				userfile.Count(userfile.ReasonUnits)
				return b[:off], true
			}
			units++
		}
		off = next
	}
	return b[:off], false
}
