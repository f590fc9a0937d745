//go:build !linux || !amd64

package marker

// haveUprobeSyscall reports whether the kernel optimizes uprobes on
// five-byte nops: only x86-64 Linux 6.18+ does.
func haveUprobeSyscall() bool { return false }
