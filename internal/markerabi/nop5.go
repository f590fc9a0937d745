package markerabi

// The Go SDK's marker on x86-64 (emit/marker_amd64.s) is a one-byte nop,
// then a five-byte nop, then a return. A collector attaches at the first
// (emulated by every kernel: a trap per hit), or, where the kernel
// optimizes uprobes on five-byte nops into a call to its uprobe trampoline
// (Linux 6.18+, the uprobe syscall), at the second. The argument sits at
// sp+8 at both. Binaries built before the second site start with a nop
// and a return: the collector checks the bytes before attaching there.
const (
	// GoNop5Offset is the five-byte nop's offset in the Go marker.
	GoNop5Offset = 1
	// GoMarkerCodeAMD64 is the Go marker's code on x86-64.
	GoMarkerCodeAMD64 = "\x90\x0f\x1f\x44\x00\x00\xc3"
)
