package funcs

import (
	"debug/elf"
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/spanwatch/spanwatch/internal/elfread"
)

// errNoEHFrame is returned by ehFunctions for a file without .eh_frame.
var errNoEHFrame = errors.New("no .eh_frame")

// maxCIEs bounds the distinct CIEs remembered while reading .eh_frame
// (compilers emit a handful).
const maxCIEs = 1 << 12

// ehFunctions calls fn with the address range of each frame description
// (FDE) in .eh_frame, until fn returns false. Every function a compiler
// emits has one unless it was built with -fno-asynchronous-unwind-tables,
// named or not. part is set for a range entered with a frame already set
// up (its rules define the CFA or save a register before the first
// instruction): not a function but a part split off one, such as the
// .cold part gcc -O2 moves a function's unlikely paths to, which the
// function jumps to and which may return for it. capped reports the section was read only up to its cap.
// An entry that cannot be read ends the walk (the ones before it stand);
// FDEs whose pointers use encodings other than absolute or PC-relative
// fixed-size ones are skipped.
func ehFunctions(ef *elf.File, fn func(addr, size uint64, part bool) bool) (capped bool, err error) {
	s := ef.Section(".eh_frame")
	if s == nil || s.Type == elf.SHT_NOBITS {
		return false, errNoEHFrame
	}
	data, capped, err := elfread.ReadSection(s, maxTable, nil, nil)
	if err != nil {
		return false, fmt.Errorf("read .eh_frame: %w", err)
	}
	bo := ef.ByteOrder
	ptrSize := 8
	if ef.Class == elf.ELFCLASS32 {
		ptrSize = 4
	}
	cies := map[uint64]cie{} // by offset
	for off := uint64(0); off+4 <= uint64(len(data)); {
		start := off
		length := uint64(bo.Uint32(data[off:]))
		off += 4
		if length == 0 {
			break // the terminator
		}
		if length == 0xffffffff {
			if off+8 > uint64(len(data)) {
				break
			}
			length = bo.Uint64(data[off:])
			off += 8
		}
		body := off
		end := body + length
		if end < body || end > uint64(len(data)) || length < 4 {
			break
		}
		off = end
		id := uint64(bo.Uint32(data[body:]))
		if id == 0 {
			if len(cies) < maxCIEs {
				c, ok := readCIE(data[body+4 : end])
				if !ok {
					c.enc = encOmit
				}
				cies[start] = c
			}
			continue
		}
		// An FDE: id is the distance back from its own field to its CIE.
		if id > body {
			continue
		}
		c, ok := cies[body-id]
		if !ok || c.enc == encOmit {
			continue
		}
		enc := c.enc
		p := body + 4
		addr, n, ok := readPointer(data[p:end], enc, bo, ptrSize, s.Addr+p)
		if !ok {
			continue
		}
		size, m, ok := readPointer(data[p+uint64(n):end], enc&0x0f, bo, ptrSize, 0)
		if !ok || addr == 0 || size == 0 {
			continue
		}
		insns := data[p+uint64(n+m) : end]
		if c.z {
			// The augmentation data's length, then the data.
			l, k, ok := uleb(insns)
			if !ok || l > uint64(len(insns)-k) {
				continue
			}
			insns = insns[k+int(l):]
		}
		if !fn(addr, size, midFrame(insns)) {
			return true, nil
		}
	}
	return capped, nil
}

// Pointer encodings (DW_EH_PE_*): the low nibble is the format, 0x10 the
// PC-relative application, 0xff omitted.
const (
	encAbsPtr = 0x00
	encUdata2 = 0x02
	encUdata4 = 0x03
	encUdata8 = 0x04
	encSdata2 = 0x0a
	encSdata4 = 0x0b
	encSdata8 = 0x0c
	encPCRel  = 0x10
	encOmit   = 0xff
)

// A cie is what an FDE needs of its CIE: the encoding of its pointers,
// and whether it has augmentation data ('z').
type cie struct {
	enc byte
	z   bool
}

// readCIE reads a CIE's body after its id: the FDE pointer encoding its
// augmentation names ('R'; absptr when it names none) and whether FDEs
// carry augmentation data.
func readCIE(b []byte) (cie, bool) {
	if len(b) < 2 {
		return cie{}, false
	}
	version := b[0]
	i := 1
	augStart := i
	for i < len(b) && b[i] != 0 {
		i++
	}
	if i >= len(b) {
		return cie{}, false
	}
	aug := string(b[augStart:i])
	i++
	if len(aug) == 0 || aug[0] != 'z' {
		return cie{enc: encAbsPtr}, true
	}
	// Code alignment, data alignment, return register.
	var ok bool
	if i, ok = skipLEB(b, i); !ok {
		return cie{}, false
	}
	if i, ok = skipLEB(b, i); !ok {
		return cie{}, false
	}
	if version == 1 {
		i++
	} else if i, ok = skipLEB(b, i); !ok {
		return cie{}, false
	}
	if i, ok = skipLEB(b, i); !ok { // augmentation data length
		return cie{}, false
	}
	for _, c := range aug[1:] {
		if i >= len(b) {
			return cie{}, false
		}
		switch c {
		case 'R':
			return cie{enc: b[i], z: true}, true
		case 'L':
			i++
		case 'P':
			enc := b[i]
			i++
			n := fixedSize(enc, 8)
			if n == 0 {
				return cie{}, false
			}
			i += n
		case 'S', 'B':
		default:
			return cie{}, false
		}
	}
	return cie{enc: encAbsPtr, z: true}, true
}

// midFrame says whether an FDE's call frame instructions change the rules
// before their first advance: a range whose first instruction runs with a
// frame already set up (the CFA elsewhere than the CIE puts it, registers
// saved, arm64's return address signed) is entered by a jump from the
// function it belongs to, not by a call.
func midFrame(insns []byte) bool {
	for _, op := range insns {
		switch {
		case op&0xc0 == 0x40, op&0xc0 == 0xc0: // advance_loc, restore
			return false
		case op&0xc0 == 0x80: // offset: a register saved
			return true
		case op == 0x00: // nop
			continue
		case op >= 0x01 && op <= 0x04: // set_loc, advance_loc1/2/4
			return false
		default:
			// def_cfa*, offset_extended*, expressions, remember_state,
			// AArch64's negate_ra_state: a rule that is not the CIE's.
			return true
		}
	}
	return false
}

// uleb decodes an unsigned LEB128 number at the start of b and returns it
// and its length.
func uleb(b []byte) (uint64, int, bool) {
	var v uint64
	for i, c := range b {
		if i == 10 {
			break
		}
		v |= uint64(c&0x7f) << (7 * i)
		if c&0x80 == 0 {
			return v, i + 1, true
		}
	}
	return 0, 0, false
}

func skipLEB(b []byte, i int) (int, bool) {
	for ; i < len(b); i++ {
		if b[i]&0x80 == 0 {
			return i + 1, true
		}
	}
	return i, false
}

// fixedSize is the size of a pointer of encoding enc; 0 for a variable
// (LEB128) or unknown one.
func fixedSize(enc byte, ptrSize int) int {
	switch enc & 0x0f {
	case encAbsPtr:
		return ptrSize
	case encUdata2, encSdata2:
		return 2
	case encUdata4, encSdata4:
		return 4
	case encUdata8, encSdata8:
		return 8
	}
	return 0
}

// readPointer decodes a pointer of encoding enc at the start of b, whose
// address is at (for PC-relative ones); it returns the value and its size.
func readPointer(b []byte, enc byte, bo binary.ByteOrder, ptrSize int, at uint64) (uint64, int, bool) {
	if enc&0x70 != 0 && enc&0x70 != encPCRel || enc&0x80 != 0 {
		return 0, 0, false // datarel, textrel, funcrel, aligned, indirect
	}
	n := fixedSize(enc, ptrSize)
	if n == 0 || len(b) < n {
		return 0, 0, false
	}
	var v uint64
	switch enc & 0x0f {
	case encAbsPtr:
		if ptrSize == 4 {
			v = uint64(bo.Uint32(b))
		} else {
			v = bo.Uint64(b)
		}
	case encUdata2:
		v = uint64(bo.Uint16(b))
	case encSdata2:
		v = uint64(int64(int16(bo.Uint16(b))))
	case encUdata4:
		v = uint64(bo.Uint32(b))
	case encSdata4:
		v = uint64(int64(int32(bo.Uint32(b))))
	case encUdata8, encSdata8:
		v = bo.Uint64(b)
	}
	if enc&0x70 == encPCRel {
		v += at
	}
	return v, n, true
}
