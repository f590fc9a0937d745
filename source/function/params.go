package function

import (
	"debug/dwarf"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/spanwatch/spanwatch/internal/elfread"
	"github.com/spanwatch/spanwatch/internal/funcs"
)

// maxDWARFSection bounds each DWARF section read to find parameters (as
// internal/symbolize's default section cap): a larger one is read up to
// it, and functions in the units past it have no parameters found.
const maxDWARFSection = 64 << 20

// maxDWARF bounds the DWARF sections' bytes read in all.
const maxDWARF = 160 << 20

// A ParamTable holds the DWARF declarations of a file's functions, to
// name their arguments by parameter.
type ParamTable struct {
	byAddr map[uint64]*elfread.Subprogram
	byName map[string]*elfread.Subprogram
	// NoDWARF says neither the file nor a separate debug file has
	// .debug_info; Capped that it was read only up to a cap.
	NoDWARF, Capped bool
	// From says where the DWARF was read: "" for the file itself, else
	// the separate debug file's path and how it was found.
	From string
	// DebugRefused are the debug files found and refused, and why.
	DebugRefused []string
	// debugLooked says a separate debug file was looked for.
	debugLooked bool
}

// ReadParams reads the DWARF declarations of b's functions from r, the
// file b was parsed from, or, when it has no .debug_info, from its
// separate debug file (b.Debug, found by build id or .gnu_debuglink):
// each DWARF section up to 64 MiB, 160 MiB in all, at most
// elfread.MaxEntries entries. A file without DWARF gives a table that
// says so (NoDWARF), not an error.
func ReadParams(r io.ReaderAt, b *Binary) (*ParamTable, error) {
	ef, err := elfread.NewFile(r)
	if err != nil {
		return nil, err
	}
	pt := &ParamTable{DebugRefused: b.DebugRefused, debugLooked: b.DebugLooked}
	if !hasDWARF(ef) && b.Debug != nil {
		ef = b.Debug.ELF
		pt.From = fmt.Sprintf("%s (found by %s)", b.Debug.Path, b.Debug.By)
	}
	// A budget over the sections together: a crafted file's compressed
	// sections each claiming the cap would otherwise take 7 times it.
	left := int64(maxDWARF)
	grant := func(n int64) int64 {
		g := min(n, left)
		left -= g
		return g
	}
	d, capped, err := elfread.DWARF(ef, maxDWARFSection, nil, grant)
	pt.Capped = capped
	if errors.Is(err, elfread.ErrNoDWARF) {
		pt.NoDWARF, pt.From = true, ""
		return pt, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read DWARF%s: %w", fromText(pt.From), err)
	}
	addrs, names := map[uint64]bool{}, map[string]bool{}
	for _, fn := range b.Funcs.Funcs {
		addrs[fn.Addr] = true
		if fn.Name != "" {
			names[fn.Name] = true
		}
	}
	byAddr, byName, more, err := elfread.Subprograms(d, addrs, names)
	if err != nil {
		return nil, fmt.Errorf("read DWARF%s: %w", fromText(pt.From), err)
	}
	pt.byAddr, pt.byName, pt.Capped = byAddr, byName, capped || more
	return pt, nil
}

func fromText(from string) string {
	if from == "" {
		return ""
	}
	return " of " + from
}

// Source says where the parameters came from, for messages and
// spanwatch functions: the file's own DWARF, its debug file's, or none
// and why (the debug files refused).
func (p *ParamTable) Source() string {
	switch {
	case p == nil:
		return "none"
	case !p.NoDWARF && p.From == "":
		return "the file's own DWARF"
	case !p.NoDWARF:
		return "DWARF of the debug file " + p.From
	}
	why := "no DWARF in the file"
	if p.debugLooked {
		why += " and no separate debug file"
	}
	if len(p.DebugRefused) > 0 {
		why += " (" + strings.Join(p.DebugRefused, "; ") + ")"
	}
	return why
}

// Lookup returns fn's DWARF declaration: the subprogram at its address,
// else the one subprogram of its name; nil if none.
func (p *ParamTable) Lookup(fn *funcs.Func) *elfread.Subprogram {
	if p == nil {
		return nil
	}
	if sp := p.byAddr[fn.Addr]; sp != nil {
		return sp
	}
	return p.byName[fn.Name]
}

// DWARF language codes (DW_LANG_*) of C and C++, whose functions follow
// the System V ABI (on arm64, AAPCS64).
var cLangs = map[int64]bool{
	0x01: true, 0x02: true, 0x0c: true, 0x1d: true, 0x2c: true, // C89, C, C99, C11, C17
	0x04: true, 0x19: true, 0x1a: true, 0x21: true, 0x2a: true, 0x2b: true, // C++, C++03, C++11, C++14, C++17, C++20
}

const (
	langGo   = 0x16
	langRust = 0x1c
)

// isCPlusPlus says lang is a C++ one: a class passed or returned by value
// may be passed by an invisible reference, by rules DWARF does not say.
func isCPlusPlus(lang int64) bool {
	switch lang {
	case 0x04, 0x19, 0x1a, 0x21, 0x2a, 0x2b:
		return true
	}
	return false
}

// resolveParams returns ops with each operand naming a parameter
// (Operand.Param) replaced by the argument register and type that
// function fn of binary bin passes it in, from its DWARF declaration in
// p, by Go's register ABI for a Go binary, the C ABI for C and C++. It
// refuses, naming the parameter and why, what it cannot place: no DWARF,
// a Rust function, a parameter passed in a floating-point register or on
// the stack, or one after a parameter whose registers depend on rules
// DWARF does not give (a C struct by value).
func resolveParams(ops []Operand, p *ParamTable, fn *funcs.Func, bin string, goABI bool, arch funcs.Arch) ([]Operand, error) {
	named := false
	for _, op := range ops {
		named = named || op.Param != ""
	}
	if !named {
		return ops, nil
	}
	name := fn.DisplayName()
	sp, err := declaration(p, fn, bin, goABI, "name arguments by position, argN")
	if err != nil {
		return nil, err
	}
	return placeNamed(ops, PlaceParams(sp, arch), func(op Operand, pl ParamPlace, ok bool) error {
		if !ok {
			return fmt.Errorf("%s in %s has no parameter %s (its parameters: %s)", name, bin, op.Param, paramNames(sp))
		}
		if pl.err != "" {
			return fmt.Errorf("%s in %s: parameter %s: %s", name, bin, op.Param, pl.err)
		}
		return nil
	})
}

// placeNamed returns ops with each operand that names a parameter or
// result (Param) replaced by where places puts it, after check accepts
// the place found (ok false: none of that name).
func placeNamed(ops []Operand, places []ParamPlace, check func(op Operand, pl ParamPlace, ok bool) error) ([]Operand, error) {
	out := make([]Operand, len(ops))
	for i, op := range ops {
		if op.Param == "" {
			out[i] = op
			continue
		}
		pl, ok := findPlace(places, op.Param)
		if err := check(op, pl, ok); err != nil {
			return nil, err
		}
		pl.op.Param = op.Param
		out[i] = pl.op
	}
	return out, nil
}

// declaration returns fn's DWARF declaration from p, or why its
// parameters cannot be placed by it (instead says what to do then): no
// DWARF, a compiler's copy, a language whose ABI is not placed here.
func declaration(p *ParamTable, fn *funcs.Func, bin string, goABI bool, instead string) (*elfread.Subprogram, error) {
	name := fn.DisplayName()
	if p == nil || p.NoDWARF {
		more := ""
		if p != nil && len(p.DebugRefused) > 0 {
			more = " (" + strings.Join(p.DebugRefused, "; ") + ")"
		}
		return nil, fmt.Errorf("no DWARF for %s in %s%s: %s", name, bin, more, instead)
	}
	sp := p.Lookup(fn)
	if sp == nil {
		more := ""
		if p.Capped {
			more = " (its DWARF was read only up to a cap)"
		}
		return nil, fmt.Errorf("no DWARF for %s in %s%s: %s", name, bin, more, instead)
	}
	if fn.Name != "" && fn.Name != sp.Name && fn.Name != sp.LinkageName {
		return nil, fmt.Errorf("%s is a compiler's copy of %s (its arguments may be changed or dropped): %s", name, sp.Name, instead)
	}
	switch {
	case goABI && sp.Lang != langGo:
		return nil, fmt.Errorf("%s: its DWARF unit's language (%#x) is not Go, as its binary is: %s", name, sp.Lang, instead)
	case goABI:
	case sp.Lang == langRust:
		return nil, fmt.Errorf("%s is a Rust function: Rust's own calling convention is not the System V one DWARF's parameters are placed by; %s", name, instead)
	case sp.Lang == langGo:
		return nil, fmt.Errorf("%s is a Go function: %s", name, instead)
	case !cLangs[sp.Lang]:
		return nil, fmt.Errorf("%s: its DWARF unit's language (%#x) is not C or C++, whose ABI parameters are placed by: %s", name, sp.Lang, instead)
	}
	return sp, nil
}

// resolveResults returns ops (an error predicate's results) with each
// result named (Operand.Param) replaced by the result register and type
// function fn passes it in: a Go function's named result (DWARF's
// formal parameter with DW_AT_variable_parameter), placed by Go's
// register ABI as its results are (from the first integer register,
// as its arguments are); an integer, bool or pointer reads with its
// size and signedness, an error or other interface as its first word
// (its type, zero for nil: err != 0 holds for a non-nil error). C and
// C++ results have no names in DWARF, and a result of another kind (a
// string, a struct) is no integer a predicate compares: refused.
func resolveResults(ops []Operand, p *ParamTable, fn *funcs.Func, bin string, goABI bool, arch funcs.Arch) ([]Operand, error) {
	named := false
	for _, op := range ops {
		named = named || op.Param != ""
	}
	if !named {
		return ops, nil
	}
	name := fn.DisplayName()
	if !goABI {
		return nil, fmt.Errorf("%s in %s: error names a result, but only Go functions name their results (a C or C++ result has no name in DWARF): read it as ret (ret.s32 for an int)", name, bin)
	}
	sp, err := declaration(p, fn, bin, goABI, "read the results by position, retN")
	if err != nil {
		return nil, err
	}
	return placeNamed(ops, placeGo(sp, arch, true), func(op Operand, pl ParamPlace, ok bool) error {
		if !ok {
			return fmt.Errorf("%s in %s has no result named %s (its named results: %s)", name, bin, op.Param, resultNames(sp))
		}
		if pl.err != "" {
			return fmt.Errorf("%s in %s: result %s: %s", name, bin, op.Param, pl.err)
		}
		if pl.op.Kind != OperandInt {
			return fmt.Errorf("%s in %s: result %s is a %s: an error predicate compares integers (an int, a bool, a pointer, an error)", name, bin, op.Param, pl.Type)
		}
		return nil
	})
}

// resultNames lists a Go function's named results ("none").
func resultNames(sp *elfread.Subprogram) string {
	var s []string
	for _, p := range sp.Params {
		if p.Result && p.Name != "" && !strings.HasPrefix(p.Name, "~") {
			s = append(s, p.Name)
		}
	}
	if len(s) == 0 {
		return "none"
	}
	return strings.Join(s, ", ")
}

func findPlace(places []ParamPlace, name string) (ParamPlace, bool) {
	for _, pl := range places {
		if pl.Name == name {
			return pl, true
		}
	}
	return ParamPlace{}, false
}

func paramNames(sp *elfread.Subprogram) string {
	if len(sp.Params) == 0 {
		return "none"
	}
	s := make([]string, len(sp.Params))
	for i, p := range sp.Params {
		s[i] = p.Name
		if s[i] == "" {
			s[i] = fmt.Sprintf("(unnamed %d)", i)
		}
	}
	return strings.Join(s, ", ")
}

// A ParamPlace is where a parameter is passed: an operand (an argument
// register, read as its type says), or why it cannot be read.
type ParamPlace struct {
	Name, Type string
	op         Operand
	err        string
}

// Arg returns the operand as argN[.TYPE] or {ptr: argN}, or "" with the
// reason it cannot be read.
func (pl ParamPlace) Arg() (string, string) {
	if pl.err != "" {
		return "", pl.err
	}
	return pl.op.Text, ""
}

// PlaceParams places sp's parameters in arch's integer argument
// registers (spanwatch functions shows them): a Go function's by Go's
// register ABI, others' by the C ABI.
func PlaceParams(sp *elfread.Subprogram, arch funcs.Arch) []ParamPlace {
	if sp.Lang == langGo {
		return placeGoParams(sp, arch)
	}
	return placeParams(sp, arch)
}

// Go's register ABI (Go 1.17+, internal/abi): 9 integer and 15
// floating-point argument registers on x86-64, 16 and 16 on arm64 (of
// which the functions source reads x0-x7).
const (
	goIntRegsAMD64   = 9
	goFloatRegsAMD64 = 15
	goRegsARM64      = 16
)

// placeGoParams places sp's parameters as Go's register ABI assigns
// them: in order, each taking the integer and floating-point registers
// its words need (a string two, a slice three, an interface two, a
// struct its fields', an array of one its element's), or, when they do
// not all fit or it is an array of more than one element, none: it goes
// on the stack and the next parameter takes the registers it would
// have. An integer or pointer parameter reads as argN with its size and
// signedness, a string as {ptr: argN, len: argN+1}; other kinds are
// shown placed but not read by name (their words can be read by
// position). A type the assignment does not know blocks the parameters
// after it.
func placeGoParams(sp *elfread.Subprogram, arch funcs.Arch) []ParamPlace {
	return placeGo(sp, arch, false)
}

// placeGo places sp's parameters, or with results its results (which
// Go's register ABI assigns the same way, from the first registers
// again), as placeGoParams says; an interface result (an error) reads
// as its first word, its type, zero for nil.
func placeGo(sp *elfread.Subprogram, arch funcs.Arch, results bool) []ParamPlace {
	maxInt, maxFloat, readable := goIntRegsAMD64, goFloatRegsAMD64, MaxGoRegs
	if arch == funcs.ArchARM64 {
		maxInt, maxFloat, readable = goRegsARM64, goRegsARM64, MaxArm64Regs
	}
	ints, floats := 0, 0
	blocked := ""
	var out []ParamPlace
	for i, p := range sp.Params {
		if p.Result != results {
			continue
		}
		pl := ParamPlace{Name: p.Name, Type: typeName(p.Type)}
		if st, ok := p.Type.(*dwarf.StructType); ok && st.Name == "" {
			pl.Type = st.StructName // string, []int: Go's own names
		}
		if pl.Name == "" {
			pl.Name = fmt.Sprintf("(unnamed %d)", i)
		}
		out = append(out, pl)
		at := &out[len(out)-1]
		if blocked != "" {
			at.err = blocked
			continue
		}
		ni, nf, how := goWords(p.Type, 0)
		switch {
		case how == goUnknown:
			at.err = "is of a type whose registers are not worked out here"
			blocked = fmt.Sprintf("it follows %s (%s), whose registers are not worked out here", at.Name, at.Type)
			continue
		case how == goStack || ints+ni > maxInt || floats+nf > maxFloat:
			at.err = "it is passed on the stack (Go's register ABI: it does not fit the registers left, or is an array of more than one element), which is not read"
			continue
		}
		reg := ints
		ints, floats = ints+ni, floats+nf
		t := strip(p.Type)
		if st, ok := t.(*dwarf.StructType); ok && st.StructName == "string" && ni == 2 {
			op := Operand{Kind: OperandPtrLen, Reg: reg, LenReg: reg + 1}
			op.Text = fmt.Sprintf("{ptr: arg%d, len: arg%d}", reg, reg+1)
			if reg+1 >= readable {
				at.err = fmt.Sprintf("it is in integer registers %d and %d, past the %d read", reg, reg+1, readable)
				continue
			}
			at.op = op
			continue
		}
		if results && ni == 2 && nf == 0 && isGoInterface(t) {
			if reg >= readable {
				at.err = fmt.Sprintf("it is in integer register %d, past the %d read", reg, readable)
				continue
			}
			op := Operand{Kind: OperandInt, Reg: reg, Size: 8}
			op.Text = fmt.Sprintf("ret%d.u64", reg)
			at.op = op
			continue
		}
		if ni != 1 || nf != 0 {
			at.err = fmt.Sprintf("takes %d integer and %d floating-point registers (from arg%d): read its words by position", ni, nf, reg)
			continue
		}
		_, op, why := classify(t, false, arch)
		if why != "" {
			at.err = why
			continue
		}
		if reg >= readable {
			at.err = fmt.Sprintf("it is in integer register %d, past the %d read", reg, readable)
			continue
		}
		op.Reg = reg
		if op.Kind == OperandCString {
			op.Kind, op.Size, op.Signed = OperandInt, 8, false // a Go *byte is no C string
		}
		op.Text = operandText(op)
		if results {
			op.Text = "ret" + strings.TrimPrefix(op.Text, "arg")
		}
		at.op = op
	}
	return out
}

// isGoInterface says t (typedefs stripped) is a Go interface as the Go
// compiler's DWARF has it: a struct of two words, runtime.iface (tab,
// data) or runtime.eface (_type, data).
func isGoInterface(t dwarf.Type) bool {
	st, ok := t.(*dwarf.StructType)
	return ok && (st.StructName == "runtime.iface" || st.StructName == "runtime.eface") && len(st.Field) == 2
}

// How a Go value is assigned: to registers, to the stack, or unknown.
const (
	goRegs = iota
	goStack
	goUnknown
)

// goWords counts the integer and floating-point registers a value of
// type t takes under Go's register ABI.
func goWords(t dwarf.Type, depth int) (ints, floats, how int) {
	if depth > 8 {
		return 0, 0, goUnknown
	}
	switch t := strip(t).(type) {
	case *dwarf.IntType, *dwarf.UintType, *dwarf.BoolType, *dwarf.CharType, *dwarf.UcharType, *dwarf.PtrType, *dwarf.AddrType:
		if t.Size() > 8 {
			return 0, 0, goUnknown
		}
		return 1, 0, goRegs
	case *dwarf.FloatType:
		return 0, 1, goRegs
	case *dwarf.ComplexType:
		return 0, 2, goRegs
	case *dwarf.StructType:
		if t.Incomplete {
			return 0, 0, goUnknown
		}
		for _, f := range t.Field {
			if f.BitSize != 0 {
				return 0, 0, goUnknown
			}
			ni, nf, how := goWords(f.Type, depth+1)
			if how != goRegs {
				return 0, 0, how
			}
			ints, floats = ints+ni, floats+nf
		}
		return ints, floats, goRegs
	case *dwarf.ArrayType:
		switch t.Count {
		case 0:
			return 0, 0, goRegs
		case 1:
			return goWords(t.Type, depth+1)
		}
		return 0, 0, goStack
	}
	return 0, 0, goUnknown
}

// placeParams counts sp's parameters through the integer argument
// registers as the System V ABI (x86-64) or AAPCS64 (arm64) assign them:
// an integer, enum, bool, pointer or reference takes the next one; a
// float or double takes a vector register and no integer one; past the
// last register they are on the stack. A struct, union or class by value
// is placed only where its size alone decides (x86-64: a C one larger
// than 16 bytes goes on the stack; arm64: larger than 16 bytes, by
// reference in one register); otherwise it and every parameter after it
// are refused with the reason. A large struct result on x86-64 takes the
// first register for its address.
func placeParams(sp *elfread.Subprogram, arch funcs.Arch) []ParamPlace {
	maxRegs := MaxCArgs
	if arch == funcs.ArchARM64 {
		maxRegs = MaxArm64Regs
	}
	cxx := isCPlusPlus(sp.Lang)
	reg := 0
	blocked := ""
	if rt := strip(sp.Result); isAggregate(rt) && arch == funcs.ArchAMD64 {
		switch {
		case rt.Size() > 16:
			reg = 1 // the result's address, in rdi
		case cxx:
			blocked = fmt.Sprintf("the function returns %s by value, and C++ may return it through an address in the first register", typeName(sp.Result))
		}
	}
	out := make([]ParamPlace, 0, len(sp.Params))
	for i, p := range sp.Params {
		if p.Result {
			continue // a Go result, declared among the parameters
		}
		pl := ParamPlace{Name: p.Name, Type: typeName(p.Type)}
		if pl.Name == "" {
			pl.Name = fmt.Sprintf("(unnamed %d)", i)
		}
		t := strip(p.Type)
		regs, op, why := classify(t, cxx, arch)
		switch {
		case blocked != "":
			pl.err = blocked
		case why != "" && regs < 0:
			pl.err = why
			blocked = fmt.Sprintf("it follows %s (%s), which %s", pl.Name, pl.Type, why)
		case why != "":
			pl.err = why
		case reg+regs > maxRegs:
			pl.err = fmt.Sprintf("it is passed on the stack: the ABI passes %d integer arguments in registers on %s, and it would be the %d%s", maxRegs, arch, reg+1, ordinal(reg+1))
		default:
			op.Reg = reg
			op.Text = operandText(op)
			pl.op = op
		}
		if regs > 0 {
			reg += regs
		}
		out = append(out, pl)
	}
	return out
}

// classify returns how many integer registers type t takes (-1: it
// depends on rules DWARF does not give), the operand that reads it
// (without its register), and why it cannot be read ("" if it can).
func classify(t dwarf.Type, cxx bool, arch funcs.Arch) (int, Operand, string) {
	op := Operand{Kind: OperandInt, Size: 8}
	switch t := t.(type) {
	case nil:
		return -1, op, "has no type in DWARF"
	case *dwarf.CharType, *dwarf.IntType:
		return intOperand(t.Size(), true)
	case *dwarf.UcharType, *dwarf.UintType, *dwarf.BoolType, *dwarf.AddrType:
		return intOperand(t.Size(), false)
	case *dwarf.EnumType:
		signed := false
		for _, v := range t.Val {
			signed = signed || v.Val < 0
		}
		return intOperand(t.Size(), signed)
	case *dwarf.PtrType:
		switch strip(t.Type).(type) {
		case *dwarf.CharType, *dwarf.UcharType:
			op.Kind = OperandCString
		default:
			op.Signed = false
		}
		return 1, op, ""
	case *dwarf.UnsupportedType:
		if t.Tag == dwarf.TagReferenceType || t.Tag == dwarf.TagRvalueReferenceType {
			return 1, op, "" // an address
		}
		return -1, op, fmt.Sprintf("is of a kind of type (%s) not placed in registers here", t.Tag)
	case *dwarf.FloatType, *dwarf.ComplexType:
		// Vector registers (x86-64: xmm; a long double on the stack;
		// arm64: v), not integer ones: the counting goes on.
		return 0, op, "is a floating-point value, passed in a vector register (or on the stack), which is not read"
	case *dwarf.StructType:
		if t.Size() > 16 && (arch == funcs.ArchARM64) {
			return 1, op, "is a struct passed by reference: its address is in a register, its fields are not read"
		}
		if t.Size() > 16 && !cxx {
			return 0, op, "is a struct larger than 16 bytes, passed on the stack, which is not read"
		}
		return -1, op, fmt.Sprintf("is a %s passed by value, whose registers depend on its fields' classes", t.Kind)
	}
	return -1, op, fmt.Sprintf("is of type %s, not placed in registers here", t)
}

func intOperand(size int64, signed bool) (int, Operand, string) {
	op := Operand{Kind: OperandInt, Size: int(size), Signed: signed}
	switch size {
	case 1, 2, 4, 8:
		return 1, op, ""
	}
	return -1, op, fmt.Sprintf("is a %d-byte integer, passed in more than one register", size)
}

// operandText writes a placed operand as the argN vocabulary does.
func operandText(op Operand) string {
	if op.Kind == OperandCString {
		return fmt.Sprintf("{ptr: arg%d}", op.Reg)
	}
	s := "s"
	if !op.Signed {
		s = "u"
	}
	return fmt.Sprintf("arg%d.%s%d", op.Reg, s, op.Size*8)
}

// strip removes typedefs and qualifiers (const, volatile), at most 16.
func strip(t dwarf.Type) dwarf.Type {
	for i := 0; i < 16; i++ {
		switch x := t.(type) {
		case *dwarf.TypedefType:
			t = x.Type
		case *dwarf.QualType:
			t = x.Type
		default:
			return t
		}
	}
	return t
}

func isAggregate(t dwarf.Type) bool {
	_, ok := t.(*dwarf.StructType)
	return ok
}

// typeName writes t as its source spells it ("const char *", "struct
// pair", a Go type's own name), at most 8 levels deep.
func typeName(t dwarf.Type) string { return cTypeName(t, 8) }

func cTypeName(t dwarf.Type, depth int) string {
	if t == nil {
		return "void"
	}
	if depth == 0 {
		return "..."
	}
	if n := t.Common().Name; n != "" {
		return n
	}
	switch t := t.(type) {
	case *dwarf.PtrType:
		if in := cTypeName(t.Type, depth-1); strings.HasSuffix(in, "*") {
			return in + "*"
		} else {
			return in + " *"
		}
	case *dwarf.QualType:
		if _, ptr := t.Type.(*dwarf.PtrType); ptr {
			return cTypeName(t.Type, depth-1) + " " + t.Qual
		}
		return t.Qual + " " + cTypeName(t.Type, depth-1)
	case *dwarf.UnsupportedType:
		switch t.Tag {
		case dwarf.TagReferenceType:
			return "reference"
		case dwarf.TagRvalueReferenceType:
			return "rvalue reference"
		}
	case *dwarf.EnumType:
		return "enum " + t.EnumName
	case *dwarf.StructType:
		return t.Kind + " " + t.StructName
	}
	return t.String()
}

func ordinal(n int) string {
	switch n {
	case 1:
		return "st"
	case 2:
		return "nd"
	case 3:
		return "rd"
	}
	return "th"
}
