package function

import (
	"fmt"
	"go/version"
	"strings"

	"github.com/spanwatch/spanwatch/internal/funcs"
)

// goTraceable says why the functions of a Go binary cannot be paired by
// goroutine, or nil. The pairing reads g from the register Go's register
// ABI keeps it in (R14 on x86-64, Go 1.17+; R28 on arm64, where the
// register ABI, and so arguments and results in registers, came with Go
// 1.18); the entry probe skips the stack check, recognized on both.
func goTraceable(f *funcs.File) error {
	minimum := "go1.17"
	switch f.Arch {
	case funcs.ArchAMD64:
	case funcs.ArchARM64:
		minimum = "go1.18"
	default:
		return fmt.Errorf("a Go binary for %s: Go functions are traced on x86-64 and arm64", f.Arch)
	}
	min := strings.TrimPrefix(minimum, "go")
	switch {
	case f.GoVersion == "":
		return fmt.Errorf("a Go binary without readable build information: its Go version, which must be %s or later on %s (the register ABI), is unknown", min, f.Arch)
	case !version.IsValid(version.Lang(f.GoVersion)):
		// A development toolchain ("devel go1.24-abcdef ...") is recent.
		if !strings.HasPrefix(f.GoVersion, "devel ") {
			return fmt.Errorf("a Go binary built by %q: not a Go version this reads; Go %s or later is needed on %s (the register ABI)", f.GoVersion, min, f.Arch)
		}
	case version.Compare(f.GoVersion, minimum) < 0:
		return fmt.Errorf("a Go binary built by %s: Go functions are traced for Go %s or later on %s (the register ABI keeps g and the arguments in registers); rebuild it with a newer Go", f.GoVersion, min, f.Arch)
	}
	return nil
}
