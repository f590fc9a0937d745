package bpf

import (
	"errors"
	"fmt"
	"runtime"
)

// ErrUnsupportedArch is what CheckArch wraps off amd64 and arm64.
var ErrUnsupportedArch = errors.New("spanwatch's BPF programs are built for amd64 and arm64 only")

// CheckArch returns an error wrapping ErrUnsupportedArch unless the
// program runs on amd64 or arm64. Each object is compiled once per
// architecture (gen.go: -target amd64,arm64): its uprobe and USDT
// programs read the registers of that architecture's struct pt_regs, and
// bpf2go embeds the x86-64 objects in 386 and amd64 builds, the arm64
// ones in arm64 builds. 386 gets the x86-64 objects, whose pt_regs is
// not a 32-bit kernel's, so they must not be loaded there; every
// constructor that loads an object calls CheckArch first.
func CheckArch() error {
	switch runtime.GOARCH {
	case "amd64", "arm64":
		return nil
	}
	return fmt.Errorf("%w, not %s: run spanwatch on an x86-64 or arm64 host", ErrUnsupportedArch, runtime.GOARCH)
}
