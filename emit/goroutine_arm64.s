#include "textflag.h"

// func getg() uintptr
// The current goroutine's g pointer, from the register where the Go
// runtime keeps it on arm64 (R28, which the assembler calls g). Unlike
// amd64, the runtime does not keep g in thread-local storage on arm64
// unless the binary uses cgo, so a sampler tells which goroutine a thread
// runs from the thread's user R28, not from its TLS (bpf/inflight.h).
TEXT ·getg(SB), NOSPLIT|NOFRAME, $0-8
	MOVD g, R0
	MOVD R0, ret+0(FP)
	RET
