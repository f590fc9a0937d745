package function

import (
	"bytes"
	"debug/elf"
	"errors"
	"fmt"
	"io"

	"gopkg.in/yaml.v3"

	"github.com/spanwatch/spanwatch/config/section"
	"github.com/spanwatch/spanwatch/internal/elfread"
	"github.com/spanwatch/spanwatch/internal/funcs"
)

// Returns is how a target sees its functions' returns.
type Returns string

const (
	// ReturnsInstructions, the default: a uprobe on each return
	// instruction, which reads and writes nothing on the user stack.
	ReturnsInstructions Returns = "instructions"
	// ReturnsUretprobe: a uretprobe on the function's first instruction,
	// for C, C++ and Rust binaries only. On a function entered by an
	// instruction the kernel emulates (push %rbp, the common case) it
	// costs about an eighth of the return instructions' uprobes, which
	// the kernel single-steps; but the kernel replaces the return
	// address on the user stack with its trampoline's, which has no
	// unwind information: a C++ exception, pthread_cancel or
	// pthread_exit, a Rust panic or backtrace() unwinding through a traced
	// call fails, and a Go program crashes (refused).
	ReturnsUretprobe Returns = "uretprobe"
)

// decodeReturns reads returns: instructions or uretprobe.
func decodeReturns(d *section.Decoder, n *yaml.Node) (Returns, bool) {
	s, ok := str(d, n, "returns")
	if !ok {
		return "", false
	}
	switch r := Returns(s); r {
	case ReturnsInstructions, ReturnsUretprobe:
		return r, true
	}
	d.Errorf(n, "returns must be instructions (a uprobe on each return instruction, the default) or uretprobe (C, C++ and Rust only), not %q", s)
	return "", false
}

// errUretprobeGo refuses returns: uretprobe on a Go binary.
var errUretprobeGo = errors.New("returns: uretprobe on a Go binary: a uretprobe replaces the return address on the goroutine's stack, which Go's stack walks (stack growth, the garbage collector, panics) refuse with a fatal \"unexpected return pc\": leave returns: at instructions for Go")

// checkUretprobe refuses a uretprobe target on a Go binary.
func checkUretprobe(t *Target, f *funcs.File) error {
	if t.Returns == ReturnsUretprobe && f.Go {
		return errUretprobeGo
	}
	return nil
}

// maxDynstr caps the dynamic string table read to look for the C++
// runtime's names.
const maxDynstr = 16 << 20

// exceptionTables says what in the ELF file r shows that code in it may
// unwind by exceptions, which a uretprobe's trampoline breaks: a
// .gcc_except_table section (C++ exceptions' or Rust panics' landing
// pads), or __gxx_personality_v0, __cxa_throw or _Unwind_RaiseException
// among its dynamic symbols' names (a substring of another name counts:
// a warning, not a refusal). Nothing, when the file cannot be read as ELF.
func exceptionTables(r io.ReaderAt) []string {
	ef, err := elfread.NewFile(r)
	if err != nil {
		return nil
	}
	var found []string
	if ef.Section(".gcc_except_table") != nil {
		found = append(found, "a .gcc_except_table section")
	}
	strtab := elfread.StringTable(ef, elfread.Table(ef, elf.SHT_DYNSYM))
	if strtab == nil {
		return found
	}
	b, _, err := elfread.ReadSection(strtab, maxDynstr, nil, nil)
	if err != nil {
		return found
	}
	for _, name := range []string{"__gxx_personality_v0", "__cxa_throw", "_Unwind_RaiseException"} {
		if bytes.Contains(b, []byte(name+"\x00")) {
			found = append(found, "the dynamic symbol "+name)
		}
	}
	return found
}

// uretprobeWarning is what a target with returns: uretprobe logs when
// its binary has exception tables.
func uretprobeWarning(found []string) string {
	return fmt.Sprintf("the binary has %v: a C++ exception, Rust panic or forced unwinding (pthread_cancel, pthread_exit) through a traced call fails, since the kernel's return trampoline has no unwind information; use returns: instructions for functions anything unwinds through", found)
}
