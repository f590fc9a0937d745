//go:build linux && arm64

package usdt

// haveUprobeSyscall reports whether the kernel optimizes uprobes on nop5
// instructions: an x86-64 feature (kernel 6.18+). arm64 has no such
// instruction and no uprobe syscall, and Open marks no arm64 call site
// as Nop5.
func haveUprobeSyscall() bool { return false }
