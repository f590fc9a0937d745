package usdt

import (
	"debug/elf"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/spanwatch/spanwatch/bpf"
)

// MaxArgs is the most arguments a USDT probe has (sys/sdt.h's limit) and the
// number of argument specs a BPF spec holds (USDT_MAX_ARGS).
const MaxArgs = int(bpf.UsdtUsdtSizesUSDT_MAX_ARGS)

// An Arch is the instruction set whose register names an argument string
// uses.
type Arch string

const (
	ArchX86_64 Arch = "x86_64"
	ArchARM64  Arch = "arm64"
)

func archOf(m elf.Machine) (Arch, error) {
	switch m {
	case elf.EM_X86_64:
		return ArchX86_64, nil
	case elf.EM_AARCH64:
		return ArchARM64, nil
	}
	return "", fmt.Errorf("USDT arguments on %s are not supported (only x86-64 and arm64)", m)
}

// IPOffset is the byte offset of the instruction pointer in the arch's
// struct pt_regs.
func (a Arch) IPOffset() uint16 {
	if a == ArchARM64 {
		return 256
	}
	return 128
}

// An ArgKind says where an argument's value is: enum usdt_arg_kind in
// bpf/usdt.h, generated.
type ArgKind uint8

const (
	// ArgConst: the value is Offset itself.
	ArgConst = ArgKind(bpf.UsdtUsdtArgKindUSDT_ARG_CONST)
	// ArgReg: the value is in register Reg.
	ArgReg = ArgKind(bpf.UsdtUsdtArgKindUSDT_ARG_REG)
	// ArgDeref: the value is in user memory at Reg + Offset, plus
	// Index * Scale when Index is set.
	ArgDeref = ArgKind(bpf.UsdtUsdtArgKindUSDT_ARG_DEREF)
)

func (k ArgKind) String() string {
	switch k {
	case ArgConst:
		return "const"
	case ArgReg:
		return "reg"
	case ArgDeref:
		return "deref"
	}
	return fmt.Sprintf("ArgKind(%d)", uint8(k))
}

// An Arg is where one probe argument lives at one call site, and how to
// widen it to 64 bits.
type Arg struct {
	Kind   ArgKind
	Size   int  // bytes: 1, 2, 4 or 8
	Signed bool // sign-extend (the size was written negative)
	// Reg is the (base) register's name as written, without '%'; RegOffset
	// is where the BPF program reads it in struct pt_regs (one byte in for
	// x86's %ah, %bh, %ch, %dh).
	Reg       string
	RegOffset uint16
	// Index, IndexOffset and Scale describe an x86 indexed address
	// "(%base,%index,scale)". Index is "" otherwise.
	Index       string
	IndexOffset uint16
	Scale       uint8
	// Offset is the constant for ArgConst and the displacement for
	// ArgDeref. For an x86 RIP-relative symbol it is the symbol's address
	// plus displacement minus the call site's address, because the BPF
	// program sees the call site's run-time address in the ip register.
	Offset int64
	// Text is the argument as written.
	Text string
}

// String renders the arg in a compact, arch-neutral way for listings.
func (a Arg) String() string {
	t := "u"
	if a.Signed {
		t = "s"
	}
	t += strconv.Itoa(a.Size * 8)
	switch a.Kind {
	case ArgConst:
		v := a.Extend(uint64(a.Offset))
		if a.Signed {
			return fmt.Sprintf("%s %d", t, int64(v))
		}
		return fmt.Sprintf("%s %d", t, v)
	case ArgReg:
		return fmt.Sprintf("%s %%%s", t, a.Reg)
	case ArgDeref:
		s := fmt.Sprintf("%s [%%%s", t, a.Reg)
		if a.Offset != 0 {
			s += fmt.Sprintf("%+d", a.Offset)
		}
		if a.Index != "" {
			s += fmt.Sprintf(" + %%%s*%d", a.Index, a.Scale)
		}
		return s + "]"
	}
	return t + " ?"
}

// Extend truncates v to the argument's size and sign- or zero-extends it
// to 64 bits, as the BPF helper does.
func (a Arg) Extend(v uint64) uint64 {
	switch a.Size {
	case 1:
		if a.Signed {
			return uint64(int64(int8(v)))
		}
		return uint64(uint8(v))
	case 2:
		if a.Signed {
			return uint64(int64(int16(v)))
		}
		return uint64(uint16(v))
	case 4:
		if a.Signed {
			return uint64(int64(int32(v)))
		}
		return uint64(uint32(v))
	}
	return v
}

// ParseArgs parses a call site's argument string for arch. Arguments that
// name a symbol (x86 "4@counter(%rip)") need the ELF file: Open resolves
// them, ParseArgs rejects them.
func ParseArgs(arch Arch, s string) ([]Arg, error) {
	return parseArgs(arch, s, 0, nil)
}

type symLookup func(name string) (uint64, bool)

func parseArgs(arch Arch, s string, pc uint64, lookup symLookup) ([]Arg, error) {
	if len(s) > maxStringLen {
		return nil, fmt.Errorf("argument string of %d bytes: more than %d", len(s), maxStringLen)
	}
	fields, err := splitArgs(s)
	if err != nil {
		return nil, fmt.Errorf("arguments %q: %w", s, err)
	}
	if len(fields) > MaxArgs {
		return nil, fmt.Errorf("arguments %q: %d arguments, more than %d", s, len(fields), MaxArgs)
	}
	args := make([]Arg, 0, len(fields))
	for i, f := range fields {
		var a Arg
		var err error
		switch arch {
		case ArchX86_64:
			a, err = parseX86Arg(f, pc, lookup)
		case ArchARM64:
			a, err = parseARM64Arg(f, lookup)
		default:
			err = fmt.Errorf("unsupported architecture %q", arch)
		}
		if err != nil {
			return nil, fmt.Errorf("argument %d %q of %q: %w", i, f, s, err)
		}
		a.Text = f
		args = append(args, a)
	}
	return args, nil
}

// splitArgs splits on blanks outside brackets: arm64 writes "4@[sp, 16]".
func splitArgs(s string) ([]string, error) {
	var out []string
	depth, start := 0, -1
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '[' || c == '(':
			depth++
			if depth > 2 {
				return nil, errors.New("brackets nested too deep")
			}
		case c == ']' || c == ')':
			depth--
			if depth < 0 {
				return nil, errors.New("unbalanced brackets")
			}
		}
		blank := c == ' ' || c == '\t'
		if blank && depth == 0 {
			if start >= 0 {
				out = append(out, s[start:i])
				start = -1
			}
			continue
		}
		if start < 0 {
			start = i
		}
	}
	if depth != 0 {
		return nil, errors.New("unbalanced brackets")
	}
	if start >= 0 {
		out = append(out, s[start:])
	}
	return out, nil
}

// splitSize splits "-4@rest" into size 4, signed, "rest". Without an "N@"
// prefix (sys/sdt.h before 2010) the size is unknown: 0.
func splitSize(f string) (size int, signed bool, rest string, err error) {
	at := strings.IndexByte(f, '@')
	if at < 0 {
		return 0, false, f, nil
	}
	n, err := strconv.Atoi(f[:at])
	if err != nil {
		return 0, false, "", fmt.Errorf("size %q is not a number", f[:at])
	}
	if n < 0 {
		signed, n = true, -n
	}
	switch n {
	case 1, 2, 4, 8:
	default:
		return 0, false, "", fmt.Errorf("size %d: only 1, 2, 4 and 8 bytes are supported", n)
	}
	if at+1 >= len(f) {
		return 0, false, "", errors.New("nothing after '@'")
	}
	return n, signed, f[at+1:], nil
}

// x86Reg is one x86-64 register name: its pt_regs offset and width.
type x86Reg struct {
	off  uint16
	size int
}

// x86Regs maps every general-purpose register name, in all its widths, to
// the 64-bit register's slot in struct pt_regs (x86-64 ABI: r15 at 0 ... ss
// at 160). The high-byte registers %ah..%dh are one byte into their slot.
var x86Regs = func() map[string]x86Reg {
	m := map[string]x86Reg{}
	legacy := []struct {
		off                     uint16
		r64, r32, r16, r8, r8hi string
	}{
		{80, "rax", "eax", "ax", "al", "ah"},
		{40, "rbx", "ebx", "bx", "bl", "bh"},
		{88, "rcx", "ecx", "cx", "cl", "ch"},
		{96, "rdx", "edx", "dx", "dl", "dh"},
		{104, "rsi", "esi", "si", "sil", ""},
		{112, "rdi", "edi", "di", "dil", ""},
		{32, "rbp", "ebp", "bp", "bpl", ""},
		{152, "rsp", "esp", "sp", "spl", ""},
	}
	for _, r := range legacy {
		m[r.r64] = x86Reg{r.off, 8}
		m[r.r32] = x86Reg{r.off, 4}
		m[r.r16] = x86Reg{r.off, 2}
		m[r.r8] = x86Reg{r.off, 1}
		if r.r8hi != "" {
			m[r.r8hi] = x86Reg{r.off + 1, 1}
		}
	}
	numbered := map[int]uint16{8: 72, 9: 64, 10: 56, 11: 48, 12: 24, 13: 16, 14: 8, 15: 0}
	for n, off := range numbered {
		r := "r" + strconv.Itoa(n)
		m[r] = x86Reg{off, 8}
		m[r+"d"] = x86Reg{off, 4}
		m[r+"w"] = x86Reg{off, 2}
		m[r+"b"] = x86Reg{off, 1}
		m[r+"l"] = x86Reg{off, 1} // Intel's name for the low byte
	}
	m["rip"] = x86Reg{128, 8}
	return m
}()

func x86Register(s string) (string, x86Reg, error) {
	if !strings.HasPrefix(s, "%") {
		return "", x86Reg{}, fmt.Errorf("%q is not a register (no %%)", s)
	}
	name := s[1:]
	r, ok := x86Regs[name]
	if !ok {
		return "", x86Reg{}, fmt.Errorf("unknown x86-64 register %q", s)
	}
	return name, r, nil
}

func parseX86Arg(f string, pc uint64, lookup symLookup) (Arg, error) {
	size, signed, loc, err := splitSize(f)
	if err != nil {
		return Arg{}, err
	}
	a := Arg{Size: size, Signed: signed}
	switch {
	case strings.HasPrefix(loc, "$"):
		v, err := parseInt(loc[1:])
		if err != nil {
			return Arg{}, fmt.Errorf("constant %q: only numeric constants are supported: %w", loc, err)
		}
		a.Kind, a.Offset = ArgConst, v
	case strings.HasPrefix(loc, "%"):
		if strings.Contains(loc, ":") {
			return Arg{}, fmt.Errorf("segment-relative operand %q (thread-local storage) is not supported", loc)
		}
		name, r, err := x86Register(loc)
		if err != nil {
			return Arg{}, err
		}
		if name == "rip" {
			return Arg{}, errors.New("%rip as a value is not supported")
		}
		a.Kind, a.Reg, a.RegOffset = ArgReg, name, r.off
		if a.Size == 0 {
			a.Size = r.size
		}
	default:
		open := strings.IndexByte(loc, '(')
		if open < 0 || !strings.HasSuffix(loc, ")") {
			return Arg{}, fmt.Errorf("unrecognized operand %q: want $CONST, %%REG, or DISP(%%REG[,%%INDEX,SCALE])", loc)
		}
		if strings.Contains(loc, ":") {
			return Arg{}, fmt.Errorf("segment-relative operand %q (thread-local storage) is not supported", loc)
		}
		disp, inner := loc[:open], loc[open+1:len(loc)-1]
		parts := strings.Split(inner, ",")
		for i := range parts {
			parts[i] = strings.TrimSpace(parts[i])
		}
		if parts[0] == "" {
			return Arg{}, fmt.Errorf("operand %q has no base register", loc)
		}
		name, r, err := x86Register(parts[0])
		if err != nil {
			return Arg{}, err
		}
		if r.size != 8 {
			return Arg{}, fmt.Errorf("operand %q: base register %%%s is not 64-bit", loc, name)
		}
		a.Kind, a.Reg, a.RegOffset = ArgDeref, name, r.off
		switch len(parts) {
		case 1:
		case 2, 3:
			iname, ir, err := x86Register(parts[1])
			if err != nil {
				return Arg{}, err
			}
			if ir.size != 8 || iname == "rip" || iname == "rsp" {
				return Arg{}, fmt.Errorf("operand %q: %%%s cannot be an index register", loc, iname)
			}
			if name == "rip" {
				return Arg{}, fmt.Errorf("operand %q: %%rip cannot be indexed", loc)
			}
			a.Index, a.IndexOffset, a.Scale = iname, ir.off, 1
			if len(parts) == 3 {
				sc, err := strconv.Atoi(parts[2])
				if err != nil || (sc != 1 && sc != 2 && sc != 4 && sc != 8) {
					return Arg{}, fmt.Errorf("operand %q: scale %q is not 1, 2, 4 or 8", loc, parts[2])
				}
				a.Scale = uint8(sc)
			}
		default:
			return Arg{}, fmt.Errorf("operand %q: too many parts in parentheses", loc)
		}
		d, err := parseDisp(disp, name == "rip", pc, lookup)
		if err != nil {
			return Arg{}, fmt.Errorf("operand %q: %w", loc, err)
		}
		a.Offset = d
		if a.Size == 0 {
			a.Size = 8
		}
	}
	if a.Size == 0 {
		a.Size = 8
	}
	return a, nil
}

// parseDisp parses an x86 displacement: "", "-16", "0x10", or, relative to
// %rip only, "sym", "sym+8", "sym-8".
func parseDisp(s string, rip bool, pc uint64, lookup symLookup) (int64, error) {
	if s == "" {
		return 0, nil
	}
	if v, err := parseInt(s); err == nil {
		if rip {
			// A bare number relative to %rip is relative to the next
			// instruction, whose address the probe does not know.
			return 0, fmt.Errorf("numeric %%rip displacement %q is not supported", s)
		}
		return v, nil
	}
	sym, add := s, int64(0)
	if i := strings.LastIndexAny(s, "+-"); i > 0 {
		v, err := parseInt(s[i:])
		if err != nil {
			return 0, fmt.Errorf("displacement %q: %w", s, err)
		}
		sym, add = s[:i], v
	}
	if !rip {
		return 0, fmt.Errorf("symbolic displacement %q is only supported relative to %%rip", s)
	}
	if lookup == nil {
		return 0, fmt.Errorf("symbol %q needs the ELF symbol table", sym)
	}
	v, ok := lookup(sym)
	if !ok {
		return 0, fmt.Errorf("symbol %q is not in the file's symbol tables (stripped?)", sym)
	}
	// The BPF program reads ip = run-time address of the call site, so the
	// symbol is at ip + (sym - pc) whatever the load address.
	return int64(v-pc) + add, nil
}

func parseInt(s string) (int64, error) {
	s = strings.TrimPrefix(s, "+")
	if s == "" {
		return 0, errors.New("empty number")
	}
	v, err := strconv.ParseInt(s, 0, 64)
	if err != nil {
		// sys/sdt.h writes unsigned 64-bit constants as they are.
		u, uerr := strconv.ParseUint(s, 0, 64)
		if uerr != nil {
			return 0, fmt.Errorf("%q is not a number", s)
		}
		return int64(u), nil
	}
	return v, nil
}

// arm64Register returns the pt_regs offset and width of an arm64 register:
// x0..x30 at 8*n, sp at 248 (struct user_pt_regs); w0..w30 are the low
// halves of x0..x30.
func arm64Register(s string) (uint16, int, error) {
	switch s {
	case "sp":
		return 248, 8, nil
	case "wsp":
		return 248, 4, nil
	case "lr":
		return 30 * 8, 8, nil
	case "fp":
		return 29 * 8, 8, nil
	}
	if len(s) >= 2 && (s[0] == 'x' || s[0] == 'w') {
		n, err := strconv.Atoi(s[1:])
		if err == nil && n >= 0 && n <= 30 && strconv.Itoa(n) == s[1:] {
			if s[0] == 'x' {
				return uint16(n * 8), 8, nil
			}
			return uint16(n * 8), 4, nil
		}
	}
	return 0, 0, fmt.Errorf("unknown arm64 register %q", s)
}

// arm64Lo12 resolves GCC's "#:lo12:SYM[+N]" offset, the low 12 bits of
// a symbol's address, which it writes for a global or static variable
// whose page address an adrp put in the base register. The low 12 bits
// are the same at run time: a load bias is a whole number of pages.
func arm64Lo12(s string, lookup symLookup) (int64, error) {
	sym, add := s, int64(0)
	if i := strings.LastIndexAny(s, "+-"); i > 0 {
		v, err := parseInt(s[i:])
		if err != nil {
			return 0, fmt.Errorf(":lo12:%s: %w", s, err)
		}
		sym, add = s[:i], v
	}
	if strings.HasPrefix(sym, ".L") {
		// A section anchor (-fsection-anchors, GCC's default on arm64
		// at -O1 and up): an assembler-local label, never in the
		// symbol table.
		return 0, fmt.Errorf("symbol %q is an assembler-local label, not in the symbol table (GCC's section anchors: build with -fno-section-anchors to name the variable)", sym)
	}
	if lookup == nil {
		return 0, fmt.Errorf("symbol %q needs the ELF symbol table", sym)
	}
	v, ok := lookup(sym)
	if !ok {
		return 0, fmt.Errorf("symbol %q is not in the file's symbol tables (stripped?)", sym)
	}
	return int64((v + uint64(add)) & 0xfff), nil
}

func parseARM64Arg(f string, lookup symLookup) (Arg, error) {
	size, signed, loc, err := splitSize(f)
	if err != nil {
		return Arg{}, err
	}
	a := Arg{Size: size, Signed: signed}
	switch {
	case strings.HasPrefix(loc, "["):
		if !strings.HasSuffix(loc, "]") {
			return Arg{}, fmt.Errorf("operand %q: missing ']'", loc)
		}
		parts := strings.Split(loc[1:len(loc)-1], ",")
		if len(parts) > 2 {
			return Arg{}, fmt.Errorf("operand %q: register-offset addressing is not supported", loc)
		}
		reg := strings.TrimSpace(parts[0])
		off, rsize, err := arm64Register(reg)
		if err != nil {
			return Arg{}, err
		}
		if rsize != 8 {
			return Arg{}, fmt.Errorf("operand %q: base register %s is not 64-bit", loc, reg)
		}
		a.Kind, a.Reg, a.RegOffset = ArgDeref, reg, off
		if len(parts) == 2 {
			d := strings.TrimPrefix(strings.TrimSpace(parts[1]), "#")
			var v int64
			var err error
			if sym, ok := strings.CutPrefix(d, ":lo12:"); ok {
				v, err = arm64Lo12(sym, lookup)
			} else {
				v, err = parseInt(d)
			}
			if err != nil {
				return Arg{}, fmt.Errorf("operand %q: offset: %w", loc, err)
			}
			a.Offset = v
		}
	default:
		c := strings.TrimPrefix(loc, "#")
		if c != "" && (c[0] == '-' || c[0] == '+' || (c[0] >= '0' && c[0] <= '9')) {
			v, err := parseInt(c)
			if err != nil {
				return Arg{}, fmt.Errorf("constant %q: %w", loc, err)
			}
			a.Kind, a.Offset = ArgConst, v
			break
		}
		off, rsize, err := arm64Register(loc)
		if err != nil {
			return Arg{}, fmt.Errorf("unrecognized operand %q: want CONST, REG, [REG] or [REG, OFFSET]: %w", loc, err)
		}
		a.Kind, a.Reg, a.RegOffset = ArgReg, loc, off
		if a.Size == 0 {
			a.Size = rsize
		}
	}
	if a.Size == 0 {
		a.Size = 8
	}
	return a, nil
}
