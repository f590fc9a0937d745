package emit

// marker is the function the collector uprobes (emit.marker.abi0). Its
// first instruction is a nop, which the kernel emulates instead of
// single-stepping: about 0.5 µs a hit instead of 13 µs. It is written in
// assembly (marker_amd64.s) so its ABI0 argument sits on the stack at sp+8.
//
//go:noescape
func marker(ev *event)
