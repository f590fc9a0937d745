package function

import (
	"fmt"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/spanwatch/spanwatch/config/section"
	"github.com/spanwatch/spanwatch/internal/srcspec"
)

// An OperandKind is how an operand is read (enum func_operand_kind in
// bpf/funcs.bpf.c).
type OperandKind uint8

// Operand kinds.
const (
	// OperandInt is an integer in an argument or result register.
	OperandInt OperandKind = iota
	// OperandCString is a pointer to a NUL-terminated string (C).
	OperandCString
	// OperandPtrLen is a pointer and a length in two registers (a Go
	// string).
	OperandPtrLen
)

// An Operand is one argument or result a functions source reads: an
// argument register at the entry (labels) or a result register at the
// return (error).
type Operand struct {
	Kind OperandKind
	// Reg is the argument's (or result's) index among the ABI's
	// integer registers: argN is N, retN is N.
	Reg int
	// LenReg is OperandPtrLen's length argument.
	LenReg int
	// Size is how many low bytes of the register an integer takes (1,
	// 2, 4 or 8), and Signed whether they are sign-extended.
	Size   int
	Signed bool
	// Text is the operand as written ("arg0.s32", "arg1[:arg2]"), or
	// as placed from a parameter ("arg0.s32", "{ptr: arg1}").
	Text string
	// Param names the function's parameter ({param: code}): Kind,
	// Reg, Size and Signed are found when the source attaches, from each
	// function's DWARF declaration (resolveParams); until then Reg is -1.
	Param string
}

// Register counts of the ABIs (bpf/funcs.bpf.c func_reg, func_result):
// Go's register ABI on x86-64 passes integer arguments and results in
// rax, rbx, rcx, rdi, rsi, r8, r9, r10 and r11; the System V ABI passes
// arguments in rdi, rsi, rdx, rcx, r8 and r9 and returns in rax and rdx.
// On arm64 both use x0-x7 (C's results in x0 and x1).
const (
	MaxGoRegs     = 9 // FUNC_MAX_REGS
	MaxCArgs      = 6
	MaxCResults   = 2
	MaxArm64Regs  = 8
	maxErrOperand = 4 // FUNC_ERR_OPERANDS
	// StringLabelLen is how many bytes of a string label are read
	// (FUNC_LABEL_STR_LEN): longer strings are cut, and strings that
	// agree in their first StringLabelLen bytes are one value.
	StringLabelLen = 64
)

// operandTypes are the integer types an operand may name after a dot:
// the register's low bytes, sign- or zero-extended.
var operandTypes = map[string]struct {
	size   int
	signed bool
}{
	"s8": {1, true}, "u8": {1, false}, "s16": {2, true}, "u16": {2, false},
	"s32": {4, true}, "u32": {4, false}, "s64": {8, true}, "u64": {8, false},
}

// parseOperand parses "argN[.TYPE]" (prefix "arg") or "retN[.TYPE]" and
// "ret[.TYPE]" (prefix "ret"): an integer register, 64-bit signed unless
// the type says otherwise.
func parseOperand(text, prefix string) (Operand, error) {
	name, typ, typed := strings.Cut(text, ".")
	op := Operand{Kind: OperandInt, Size: 8, Signed: true, Text: text}
	if typed {
		t, ok := operandTypes[typ]
		if !ok {
			return op, fmt.Errorf("%s: unknown type %q: want s8, u8, s16, u16, s32, u32, s64 or u64 (the register's low bytes, sign- or zero-extended)", text, typ)
		}
		op.Size, op.Signed = t.size, t.signed
	}
	n, ok := strings.CutPrefix(name, prefix)
	if !ok {
		return op, fmt.Errorf("unknown operand %s", text)
	}
	if prefix == "ret" && n == "" {
		return op, nil
	}
	i, err := strconv.Atoi(n)
	if err != nil || i < 0 || i >= MaxGoRegs || strconv.Itoa(i) != n {
		return op, fmt.Errorf("unknown operand %s: want %s0 to %s%d", text, prefix, prefix, MaxGoRegs-1)
	}
	op.Reg = i
	return op, nil
}

// labelOperand decodes a label's value: argN[.TYPE] (an integer
// argument), or a string argument {ptr: argP} (NUL-terminated) or {ptr:
// argP, len: argL} (a pointer and a length, as a Go string is passed);
// the arguments may be written N instead of argN, as USDT's name_arg:
// {ptr: P, len: L} writes them.
func labelOperand(d *section.Decoder, name string, v *yaml.Node) (Operand, bool) {
	v = section.Resolve(v)
	if v.Kind == yaml.MappingNode && len(v.Content) >= 2 && v.Content[0].Value == "param" {
		return paramOperand(d, name, v)
	}
	if v.Kind == yaml.MappingNode {
		return strOperand(d, name, v)
	}
	if v.Kind != yaml.ScalarNode || v.Tag == "!!null" || v.Value == "" {
		d.Errorf(v, "label %s: want an argument, like arg2 (arg2.s32 for a C int), a string {ptr: arg1} or {ptr: arg1, len: arg2}, or a parameter by name {param: code}", name)
		return Operand{}, false
	}
	if strings.HasPrefix(v.Value, "ret") {
		d.Errorf(v, "label %s: %s is a result: labels read the arguments at the entry (arg0 to arg%d); error: reads the results", name, v.Value, MaxGoRegs-1)
		return Operand{}, false
	}
	op, err := parseOperand(v.Value, "arg")
	if err != nil {
		d.Errorf(v, "label %s: %v (the function's arguments)", name, err)
		return Operand{}, false
	}
	return op, true
}

// paramOperand decodes {param: NAME}: the function's parameter,
// placed from DWARF when the source attaches.
func paramOperand(d *section.Decoder, name string, v *yaml.Node) (Operand, bool) {
	op := Operand{Reg: -1, LenReg: -1}
	what := "label " + name
	before := d.Len()
	ok := d.Fields(v, what, []string{"param"}, func(_ string, _, x *yaml.Node) {
		x = section.Resolve(x)
		if x.Kind != yaml.ScalarNode || x.Tag == "!!null" || !isIdent(x.Value) {
			d.Errorf(x, "%s: param must be a parameter's name as the source declares it, like code", what)
			return
		}
		op.Param = x.Value
		op.Text = "param " + x.Value
	})
	return op, ok && d.Len() == before
}

// isIdent says s is a C identifier.
func isIdent(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || i > 0 && c >= '0' && c <= '9') {
			return false
		}
	}
	return s != ""
}

func strOperand(d *section.Decoder, name string, v *yaml.Node) (Operand, bool) {
	op := Operand{Kind: OperandCString, Reg: -1, LenReg: -1}
	what := "label " + name
	before := d.Len()
	ok := d.Fields(v, what, []string{"ptr", "len"}, func(key string, _, x *yaml.Node) {
		x = section.Resolve(x)
		i, good := argIndex(x)
		if !good {
			d.Errorf(x, "%s: %s must be an argument, arg0 to arg%d (or its index)", what, key, MaxGoRegs-1)
			return
		}
		if key == "ptr" {
			op.Reg = i
		} else {
			op.LenReg = i
		}
	})
	if !ok || d.Len() > before {
		return op, false
	}
	switch {
	case op.Reg < 0:
		d.Errorf(v, "%s needs ptr: argN, the argument holding the string's address", what)
		return op, false
	case op.LenReg == op.Reg:
		d.Errorf(v, "%s: ptr and len are the same argument (arg%d)", what, op.Reg)
		return op, false
	case op.LenReg >= 0:
		op.Kind = OperandPtrLen
		op.Text = fmt.Sprintf("arg%d[:arg%d]", op.Reg, op.LenReg)
	default:
		op.Text = fmt.Sprintf("arg%d", op.Reg)
	}
	return op, true
}

// argIndex reads argN or N.
func argIndex(n *yaml.Node) (int, bool) {
	if n.Kind != yaml.ScalarNode {
		return 0, false
	}
	s := strings.TrimPrefix(n.Value, "arg")
	i, err := strconv.Atoi(s)
	if err != nil || i < 0 || i >= MaxGoRegs || strconv.Itoa(i) != s {
		return 0, false
	}
	return i, true
}

// errorResolver resolves the operands of an error predicate: the
// results at the return, ret (ret0) to ret8, each with an optional
// type, or a Go function's named result by its name (err), placed from
// DWARF when the source attaches (resolveResults); numbered in
// t.Results as they are met (at most 4 distinct).
func errorResolver(t *Target) srcspec.Resolver {
	return func(name string) (int, error) {
		if strings.HasPrefix(name, "arg") {
			return 0, fmt.Errorf("%s is an argument: error: reads the results at the return (ret, ret0 to ret%d), when the arguments' registers hold other values; label the call by it instead", name, MaxGoRegs-1)
		}
		var op Operand
		if !strings.HasPrefix(name, "ret") && isIdent(name) {
			// A result by name: a Go function's named result.
			op = Operand{Reg: -1, LenReg: -1, Param: name, Text: name}
		} else {
			var err error
			op, err = parseOperand(name, "ret")
			if err != nil {
				return 0, fmt.Errorf("%v (the results: ret is ret0, the first; a Go function's error result is two registers, its type word first; a Go function's named result by its name)", err)
			}
		}
		for i, r := range t.Results {
			if r.Param == op.Param && r.Reg == op.Reg && r.Size == op.Size && r.Signed == op.Signed {
				return i, nil
			}
		}
		if len(t.Results) == maxErrOperand {
			return 0, fmt.Errorf("%s: an error predicate reads at most %d distinct results", name, maxErrOperand)
		}
		t.Results = append(t.Results, op)
		return len(t.Results) - 1, nil
	}
}

// An abiError is an operand the function's ABI does not pass in a
// register: label Label's (or -1), or error operand Result's (or -1).
type abiError struct {
	Label, Result int
	msg           string
}

func (e *abiError) Error() string { return e.msg }

// checkABI reports the first operand of t that the function's ABI does
// not have, as an *abiError: C passes 6 arguments and returns 2 results
// in registers on x86-64; arm64 has 8 of each (x0-x7), C's results x0
// and x1.
func (t *Target) checkABI(goABI bool, arch string) error {
	maxArg, maxRet := MaxGoRegs, MaxGoRegs
	switch {
	case arch == "arm64" && goABI:
		maxArg, maxRet = MaxArm64Regs, MaxArm64Regs
	case arch == "arm64":
		maxArg, maxRet = MaxArm64Regs, MaxCResults
	case !goABI:
		maxArg, maxRet = MaxCArgs, MaxCResults
	}
	abi := "the System V ABI"
	if goABI {
		abi = "Go's register ABI"
	}
	for i, op := range t.LabelOperands {
		if op.Param != "" {
			continue // placed from DWARF, within the registers
		}
		if op.Reg >= maxArg || op.LenReg >= maxArg {
			return &abiError{Label: i, Result: -1, msg: fmt.Sprintf("label %s reads %s, but %s passes %d integer arguments in registers on %s (arg0 to arg%d)",
				t.Labels.List[i].Name, op.Text, abi, maxArg, arch, maxArg-1)}
		}
	}
	for i, op := range t.Results {
		if op.Reg >= maxRet {
			return &abiError{Label: -1, Result: i, msg: fmt.Sprintf("error reads %s, but %s returns %d integer results in registers on %s (ret0 to ret%d)", op.Text, abi, maxRet, arch, maxRet-1)}
		}
	}
	return nil
}

// namesParams says a label names a parameter ({param: NAME}), or the
// error predicate a result by name.
func (t *Target) namesParams() bool {
	for _, op := range append(t.LabelOperands[:len(t.LabelOperands):len(t.LabelOperands)], t.Results...) {
		if op.Param != "" {
			return true
		}
	}
	return false
}
