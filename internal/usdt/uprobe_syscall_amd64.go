//go:build linux && amd64

package usdt

import (
	"errors"

	"golang.org/x/sys/unix"
)

// sysUprobe is the x86-64 uprobe syscall (kernel 6.18+), which the
// kernel's uprobe trampoline calls for optimized uprobes.
const sysUprobe = 336

// haveUprobeSyscall reports whether the kernel optimizes uprobes on nop5
// instructions. Called from anywhere but the trampoline, the syscall fails
// with ENXIO (and with ENOSYS where it does not exist): libbpf's probe.
func haveUprobeSyscall() bool {
	_, _, errno := unix.Syscall(sysUprobe, 0, 0, 0)
	return errors.Is(errno, unix.ENXIO)
}
