/*
 * A probe emitted as "nop; nop5" (sw:nop5), as newer sys/sdt.h headers do
 * on x86-64 so kernels with optimized uprobes (6.18+) can turn the uprobe
 * on the nop5 into a call. See sdtprog.c.
 */
#include <stdint.h>
#include <sys/sdt.h>

/* x86-64 only: elsewhere the probe is sys/sdt.h's plain nop. */
#if defined(__x86_64__)
#undef _SDT_NOP
#define _SDT_NOP nop; .byte 0x0f; .byte 0x1f; .byte 0x44; .byte 0x00; .byte 0x00
#endif

volatile int32_t g_nop5 = -31337;

__attribute__((noinline)) void nop5_fire(long seed)
{
	/* Three hits: the first traps and has the kernel optimize the
	 * uprobe, the later ones go through the uprobe syscall. */
	for (int i = 0; i < 3; i++) {
		uint64_t v = 0xabcdef0123456789ull + (uint64_t)seed;
		STAP_PROBE2(sw, nop5, v, g_nop5);
		__asm__ __volatile__("" ::: "memory");
	}
}
