#include "textflag.h"

// func marker(ev *event)
// The collector's uprobe reads ev from 8(SP) at either nop (neither moves
// SP). Two sites (internal/markerabi.GoNop5Offset):
//
//   - offset 0, the one-byte nop (0x90): emulated by every kernel, a trap
//     per hit. Collectors before the nop5 site attach here, and so does
//     the collector on kernels without the uprobe syscall.
//   - offset 1, the five-byte nop (0f 1f 44 00 00): Linux 6.18+ rewrites
//     a uprobe there into a call to its uprobe trampoline (a syscall, no
//     trap). The call pushes its return address below SP, and the
//     trampoline three registers: 32 bytes this function never uses (it
//     has no frame) and that no Go caller keeps data in (Go code has no
//     red zone: the runtime's asynchronous preemption pushes a call below
//     SP at any instruction). TestNop5RedZone checks both on the kernel.
TEXT ·marker(SB), NOSPLIT|NOFRAME, $0-8
	BYTE $0x90                                     // nop: the trap site
	BYTE $0x0f; BYTE $0x1f; BYTE $0x44; BYTE $0x00; BYTE $0x00 // nopl 0(%rax,%rax,1): the optimized site
	RET
