package bpf

import (
	"errors"
	"fmt"
	"runtime"
)

// ErrUnsupportedArch is what CheckArch wraps off amd64.
var ErrUnsupportedArch = errors.New("spanwatch's BPF programs are built for amd64 only")

// CheckArch returns an error wrapping ErrUnsupportedArch unless the
// program runs on amd64. The objects are compiled with
// -D__TARGET_ARCH_x86: their uprobe and USDT programs read x86-64
// registers out of struct pt_regs, so they must not be loaded elsewhere.
// bpf2go writes their Go types for every little-endian architecture
// (-target bpfel) only so that the code builds and vets there; every
// constructor that loads an object calls CheckArch first.
func CheckArch() error {
	if runtime.GOARCH != "amd64" {
		return fmt.Errorf("%w, not %s: run spanwatch on an x86-64 host", ErrUnsupportedArch, runtime.GOARCH)
	}
	return nil
}
