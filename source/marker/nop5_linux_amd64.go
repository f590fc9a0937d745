//go:build linux && amd64

package marker

import (
	"errors"

	"golang.org/x/sys/unix"
)

// sysUprobe is x86-64's uprobe syscall (Linux 6.18+), which only the
// kernel's uprobe trampoline may call.
const sysUprobe = 336

// haveUprobeSyscall reports whether the kernel optimizes uprobes on
// five-byte nops into calls to its uprobe trampoline: called from anywhere
// else the syscall fails with ENXIO (ENOSYS where it does not exist), the
// probe libbpf uses to choose a USDT's nop5.
func haveUprobeSyscall() bool {
	_, _, errno := unix.Syscall(sysUprobe, 0, 0, 0)
	return errors.Is(errno, unix.ENXIO)
}
