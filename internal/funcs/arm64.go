package funcs

import (
	"encoding/binary"
	"fmt"
)

// A64 code is decoded here from its encodings (Arm Architecture
// Reference Manual, A64 instruction set encoding) rather than by
// golang.org/x/arch/arm64/arm64asm, which knows no ARMv8.1 atomics
// (LDADDAL, which Go's sync/atomic compiles to, and every gcc -O2 atomic)
// nor pointer authentication's returns: a function holding one would be
// refused as undecodable. Every A64 instruction is one 32-bit word, and
// only the words of the group "branches, exception generating and system
// instructions" (bits 28:26 = 101) can move the program counter anywhere
// but to the next word, so a word outside that group, known or not (an
// atomic, SVE, the zero words Go pads a function with), is stepped over
// without changing what is found. A word of the group this does not know
// refuses the function.

// sext sign-extends the low bits bits of v.
func sext(v uint32, bits uint) int64 {
	return int64(int32(v<<(32-bits)) >> (32 - bits))
}

// arm64Literals marks the words of code that a load of a literal in
// code reads (LDR Xt/Wt/St/Dt/Qt, LDRSW with a PC-relative address): a
// literal pool, data in the function's own code, which Go's assembler
// writes for constants it cannot build in a few instructions. Such words
// are not instructions and must not be taken for a return or a jump.
func arm64Literals(code []byte, addr uint64) []bool {
	var data []bool
	n := uint64(len(code) / 4)
	for pc := 0; pc+4 <= len(code); pc += 4 {
		w := binary.LittleEndian.Uint32(code[pc:])
		if w&0x3b000000 != 0x18000000 {
			continue
		}
		opc, simd := w>>30, w>>26&1 == 1
		size := uint64(0)
		switch {
		case !simd && (opc == 0 || opc == 2), simd && opc == 0:
			size = 4
		case opc == 1:
			size = 8
		case simd && opc == 2:
			size = 16
		default: // PRFM: a prefetch reads nothing
			continue
		}
		at := addr + uint64(pc)
		target := at + uint64(sext(w>>5&0x7ffff, 19)*4)
		if target < addr || target-addr >= uint64(len(code)) {
			continue
		}
		if data == nil {
			data = make([]bool, n)
		}
		for i := (target - addr) / 4; i < min(n, (target-addr+size+3)/4); i++ {
			data[i] = true
		}
	}
	return data
}

// scanARM64 is scanAMD64 for arm64 code: RET (through x30, the link
// register) and RETAA, RETAB as returns, BR (and BRAA, BRAB, ...) as an
// indirect jump, and B, B.cond, CBZ, CBNZ, TBZ and TBNZ to outside the
// function as exits. A RET through another register than x30 is refused
// as a tail call: compilers return through x30, and a RET through x16 or
// x17 is a jump to an address the function computed (a veneer, an
// interposer), whose return, if any, is another function's. BL and BLR
// are calls: they return to the next word.
func scanARM64(code []byte, addr uint64) (rets []uint64, indirect int, exits []exit, ref refusal) {
	end := addr + uint64(len(code))
	if len(code)%4 != 0 {
		return nil, 0, nil, refusal{ReasonUndecodable, fmt.Sprintf("a size of %d bytes, not a multiple of 4", len(code))}
	}
	data := arm64Literals(code, addr)
	branch := func(at uint64, off int64, op string) {
		if target := at + uint64(off); target < addr || target >= end {
			exits = append(exits, exit{at, target, op})
		}
	}
	for pc := 0; pc < len(code); pc += 4 {
		if data != nil && data[pc/4] {
			continue
		}
		w := binary.LittleEndian.Uint32(code[pc:])
		at := addr + uint64(pc)
		if w>>26&7 != 5 {
			continue // not a branch, exception or system instruction
		}
		switch {
		case w&0xfc000000 == 0x14000000: // B
			branch(at, sext(w&0x3ffffff, 26)*4, "b")
		case w&0xfc000000 == 0x94000000: // BL: a call
		case w&0xff000000 == 0x54000000: // B.cond, BC.cond
			branch(at, sext(w>>5&0x7ffff, 19)*4, "b.cond")
		case w&0x7e000000 == 0x34000000: // CBZ, CBNZ
			branch(at, sext(w>>5&0x7ffff, 19)*4, map[bool]string{false: "cbz", true: "cbnz"}[w>>24&1 == 1])
		case w&0x7e000000 == 0x36000000: // TBZ, TBNZ
			branch(at, sext(w>>5&0x3fff, 14)*4, map[bool]string{false: "tbz", true: "tbnz"}[w>>24&1 == 1])
		case w&0xfe1f0000 == 0xd61f0000: // branch to a register
			opc, op3, rn, op4 := w>>21&0xf, w>>10&0x3f, w>>5&0x1f, w&0x1f
			switch {
			case opc == 2 && op3 == 0 && op4 == 0 && rn == 30: // RET
				rets = append(rets, at)
			case opc == 2 && (op3 == 2 || op3 == 3) && rn == 31 && op4 == 31: // RETAA, RETAB
				rets = append(rets, at)
			case opc == 2 && op3 == 0 && op4 == 0:
				return nil, 0, nil, refusal{ReasonTailCall, fmt.Sprintf("ret x%d at %#x: a return through another register than x30, a jump the function computed", rn, at)}
			case opc == 0 || opc == 8: // BR, BRAAZ, BRABZ, BRAA, BRAB
				indirect++
			case opc == 1 || opc == 9: // BLR and its authenticated forms: calls
			default: // ERET, DRPS: not user code
				return nil, 0, nil, refusal{ReasonUndecodable, fmt.Sprintf("at %#x: %08x", at, w)}
			}
		case w&0xff000000 == 0xd4000000: // SVC, BRK, HLT, ...: no jump
		case w&0xff000000 == 0xd5000000: // system: hints (NOP, BTI, PACIASP), barriers, MRS, MSR
		default:
			return nil, 0, nil, refusal{ReasonUndecodable, fmt.Sprintf("at %#x: %08x, a branch this does not know", at, w)}
		}
	}
	return rets, indirect, exits, refusal{}
}

// goStackCheckARM64 is goStackCheckAMD64 for arm64: the length of the
// stack check a Go function begins with, or 0. Go's compiler
// (cmd/internal/obj/arm64, stacksplit) writes
//
//	MOVD 16(g), R16; CMP R16, RSP; BLS more               (small frames)
//	MOVD 16(g), R16; SUB $N, RSP, R17; CMP R16, R17; BLS more
//	                                                      (larger frames)
//	MOVD 16(g), R16; MOVD $N, R27; SUBS R27, RSP, R17; BLO more;
//	CMP R16, R17; BLS more                                (past StackBig)
//
// where g is R28 and 16(g) g.stackguard0 (24(g), stackguard1, in a
// function the runtime runs on the system stack), and "more" is a block
// in the function that saves the argument registers, calls
// runtime.morestack* and jumps back to the first instruction. The
// check's branches must stay in the function, and nothing before the
// CMP may write anything but the linker's and the check's scratch
// registers (R16, R17, R27): the arguments and SP are as the caller
// left them at the instruction after the BLS.
func goStackCheckARM64(code []byte, addr uint64) int {
	word := func(i int) (uint32, bool) {
		if i*4+4 > len(code) {
			return 0, false
		}
		return binary.LittleEndian.Uint32(code[i*4:]), true
	}
	inside := func(i int, w uint32) bool {
		t := int64(i*4) + sext(w>>5&0x7ffff, 19)*4
		return t >= 0 && t < int64(len(code))
	}
	scratch := func(w uint32) bool { rd := w & 0x1f; return rd == 16 || rd == 17 || rd == 27 }
	// LDR Xguard, [X28, #16 or #24]
	w, ok := word(0)
	if !ok || w&0xffc003e0 != 0xf9400380 || (w>>10&0xfff != 2 && w>>10&0xfff != 3) || !scratch(w) {
		return 0
	}
	guard := w & 0x1f
	for i := 1; i < 6; i++ {
		w, ok := word(i)
		if !ok {
			return 0
		}
		switch {
		case w&0x7f000000 == 0x6b000000 && w&0x1f == 31 && w>>16&0x1f == guard,
			w&0x7f200000 == 0x6b200000 && w&0x1f == 31 && w>>16&0x1f == guard:
			// CMP guard, Xn (SUBS XZR, Xn, guard; Xn may be SP in the
			// extended-register form), then BLS inside.
			b, ok := word(i + 1)
			if !ok || b&0xff00001f != 0x54000009 || !inside(i+1, b) {
				return 0
			}
			return (i + 2) * 4
		case w&0x1f800000 == 0x12800000 && scratch(w): // MOVZ, MOVN, MOVK
		case w&0x1f800000 == 0x12000000 && scratch(w): // ORR (a bitmask immediate)
		case w&0x1f000000 == 0x11000000 && scratch(w): // ADD, SUB (immediate)
		case w&0x1f000000 == 0x0b000000 && scratch(w): // ADD, SUB (register)
		case w&0xff00001f == 0x54000003 && inside(i, w): // BLO inside
		default:
			return 0
		}
	}
	return 0
}
