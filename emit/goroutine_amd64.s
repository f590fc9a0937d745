#include "textflag.h"

// func getg() uintptr
// The current goroutine's g pointer, from the thread-local slot where the
// Go runtime keeps it (the slot BPF reads to tell which goroutine a thread
// runs; bpf/inflight.h).
TEXT ·getg(SB), NOSPLIT|NOFRAME, $0-8
	MOVQ (TLS), AX
	MOVQ AX, ret+0(FP)
	RET
