package function

import (
	"errors"
	"fmt"
	"go/version"
	"strings"

	"github.com/spanwatch/spanwatch/internal/funcs"
)

// goTraceable says why the functions of a Go binary cannot be paired by
// goroutine, or nil. The pairing reads g from the register Go's register
// ABI keeps it in (Go 1.17+); the entry probe skips the stack check,
// recognized on x86-64 only so far.
func goTraceable(f *funcs.File) error {
	switch {
	case f.Arch != funcs.ArchAMD64:
		return fmt.Errorf("a Go binary for %s: Go functions are traced on x86-64 only so far", f.Arch)
	case f.GoVersion == "":
		return errors.New("a Go binary without readable build information: its Go version, which must be 1.17 or later (the register ABI), is unknown")
	case !version.IsValid(version.Lang(f.GoVersion)):
		// A development toolchain ("devel go1.24-abcdef ...") is recent.
		if !strings.HasPrefix(f.GoVersion, "devel ") {
			return fmt.Errorf("a Go binary built by %q: not a Go version this reads; Go 1.17 or later is needed (the register ABI)", f.GoVersion)
		}
	case version.Compare(f.GoVersion, "go1.17") < 0:
		return fmt.Errorf("a Go binary built by %s: Go functions are traced for Go 1.17 or later (the register ABI keeps g in a register); rebuild it with a newer Go", f.GoVersion)
	}
	return nil
}
