package funcs

import (
	"fmt"

	"golang.org/x/arch/x86/x86asm"
)

// An exit is a jump, conditional or not, out of the code scanned: a tail
// call, or a jump to a part of the function placed elsewhere.
type exit struct {
	at, target uint64
	op         string
}

// scanAMD64 decodes code, x86-64 code at addr, from its start to its end
// (a linear sweep: compilers put no data between a function's
// instructions on x86-64), and returns the addresses of its return
// instructions, the count of its indirect jumps and its jumps out of the
// code, or why it is refused: an instruction that does not decode.
func scanAMD64(code []byte, addr uint64) (rets []uint64, indirect int, exits []exit, ref refusal) {
	end := addr + uint64(len(code))
	for pc := 0; pc < len(code); {
		// ENDBR64, which x86asm does not know: the first instruction of
		// functions built with -fcf-protection (Debian's default).
		if len(code)-pc >= 4 && code[pc] == 0xf3 && code[pc+1] == 0x0f && code[pc+2] == 0x1e && code[pc+3] == 0xfa {
			pc += 4
			continue
		}
		inst, err := x86asm.Decode(code[pc:], 64)
		if err != nil || inst.Len == 0 {
			return nil, 0, nil, refusal{ReasonUndecodable, fmt.Sprintf("at %#x: % x", addr+uint64(pc), code[pc:min(pc+8, len(code))])}
		}
		at := addr + uint64(pc)
		next := at + uint64(inst.Len)
		pc += inst.Len
		switch inst.Op {
		case x86asm.RET:
			rets = append(rets, at)
		case x86asm.JMP, x86asm.JA, x86asm.JAE, x86asm.JB, x86asm.JBE, x86asm.JCXZ, x86asm.JE, x86asm.JECXZ,
			x86asm.JG, x86asm.JGE, x86asm.JL, x86asm.JLE, x86asm.JNE, x86asm.JNO, x86asm.JNP, x86asm.JNS,
			x86asm.JO, x86asm.JP, x86asm.JRCXZ, x86asm.JS, x86asm.LOOP, x86asm.LOOPE, x86asm.LOOPNE:
			rel, ok := inst.Args[0].(x86asm.Rel)
			if !ok {
				indirect++
				continue
			}
			target := next + uint64(int64(rel))
			if target < addr || target >= end {
				exits = append(exits, exit{at, target, inst.Op.String()})
			}
		}
	}
	return rets, indirect, exits, refusal{}
}

// goStackCheckAMD64 returns the length of the stack check a Go function
// (register ABI, Go 1.17+) begins with, code being its code at addr, or 0
// when it has none (a NOSPLIT function). The compiler writes one of
//
//	CMPQ SP, 16(R14); JBE more                     (small frames)
//	LEAQ -N(SP), R12; CMPQ R12, 16(R14); JBE more  (larger frames)
//	MOVQ SP, R12; SUBQ $N, R12; JB more; CMPQ R12, 16(R14); JBE more
//	                                               (frames past StackBig)
//
// where R14 is g and 16(R14) is g.stackguard0, and "more" is a block in
// the function that calls runtime.morestack* and jumps back to the first
// instruction. The check's jumps must stay in the function and nothing
// before the CMPQ may write anything but R12.
func goStackCheckAMD64(code []byte, addr uint64) int {
	end := addr + uint64(len(code))
	inside := func(inst x86asm.Inst, next uint64) bool {
		rel, ok := inst.Args[0].(x86asm.Rel)
		if !ok {
			return false
		}
		t := next + uint64(int64(rel))
		return t >= addr && t < end
	}
	for pc, n := 0, 0; pc < len(code) && n < 5; n++ {
		inst, err := x86asm.Decode(code[pc:], 64)
		if err != nil || inst.Len == 0 {
			return 0
		}
		pc += inst.Len
		next := addr + uint64(pc)
		switch inst.Op {
		case x86asm.CMP:
			m, ok := inst.Args[1].(x86asm.Mem)
			if !ok || m.Base != x86asm.R14 || m.Disp != 16 || m.Index != 0 || m.Segment != 0 ||
				(inst.Args[0] != x86asm.RSP && inst.Args[0] != x86asm.R12) {
				return 0
			}
			j, err := x86asm.Decode(code[pc:], 64)
			if err != nil || j.Op != x86asm.JBE || !inside(j, next+uint64(j.Len)) {
				return 0
			}
			return pc + j.Len
		case x86asm.LEA, x86asm.MOV, x86asm.SUB:
			if inst.Args[0] != x86asm.R12 {
				return 0
			}
		case x86asm.JB:
			if !inside(inst, next) {
				return 0
			}
		default:
			return 0
		}
	}
	return 0
}

// opName is an instruction's mnemonic in lower case, as objdump writes it.
func opName(s string) string {
	b := []byte(s)
	for i, c := range b {
		if c >= 'A' && c <= 'Z' {
			b[i] = c + 'a' - 'A'
		}
	}
	return string(b)
}
