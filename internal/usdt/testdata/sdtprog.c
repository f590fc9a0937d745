/*
 * A USDT test program for internal/usdt's tests, built by the test with
 * sys/sdt.h at -O0 and -O2. It prints "ready", waits for a line on stdin
 * (the test attaches meanwhile), fires every probe once with the values
 * below, prints "done" and exits. tracer_test.go holds the same values.
 *
 * Probes (provider sw):
 *   aN      N = 0..12 arguments computed at run time (registers at -O2,
 *           stack memory at -O0, and stack memory past the registers)
 *   consts  8 literal constants of every size and sign
 *   mem     8 volatile globals (memory operands, RIP-relative at -O2 on
 *           x86-64)
 *   inl     an always_inline function holding the probe, called from 3
 *           sites with different arguments
 *   asmargs written in assembly, for each architecture the operands
 *           GCC's templates rarely produce: on x86-64 a high-byte
 *           register (%ah), a 16-bit register and indexed memory
 *           operands "(%rdx,%rcx,8)"; on aarch64 an x and a w register,
 *           "[xN, -8]", "[xN]", "[xN, 8]", "[sp, 8]", a constant and a
 *           signed byte of a register
 *   badarg  an argument spanwatch cannot read: thread-local (%fs-relative)
 *           on x86-64, register-offset "[x1, x2, lsl 3]" on aarch64
 *   sem     guarded by a semaphore (in sdtsem.c)
 *   nop5    emitted as "nop; nop5" on x86-64, a plain nop elsewhere (in
 *           sdtnop5.c)
 *   swlib:fire  in the shared library libsdtlib.so (sdtlib.c)
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/sdt.h>

#define V0 200
#define V1 -100
#define V2 60000
#define V3 -30000
#define V4 4000000000u
#define V5 -2000000000
#define V6 0xfedcba9876543210ull
#define V7 -5000000000123ll
#define V8 -1
#define V9 -2
#define V10 -3
#define V11 -4

void sem_fire(long seed);
void nop5_fire(long seed);
unsigned short sem_semaphore_value(void);
void lib_fire(long seed);

volatile uint8_t g_u8 = V0;
volatile int8_t g_s8 = V1;
volatile uint16_t g_u16 = V2;
volatile int16_t g_s16 = V3;
volatile uint32_t g_u32 = V4;
volatile int32_t g_s32 = V5;
volatile uint64_t g_u64 = V6;
volatile int64_t g_s64 = V7;

static inline __attribute__((always_inline)) void inl(int64_t x, uint32_t y)
{
	STAP_PROBE2(sw, inl, x, y);
}

int64_t g_arr[4] = {10, 20, -30, 40};

#if defined(__x86_64__)
__attribute__((noinline)) void asm_fire(void)
{
	__asm__ __volatile__(
		"movabsq $0x1122334455668899, %%rax\n\t"
		"leaq %[arr], %%rdx\n\t"
		"movq $2, %%rcx\n\t"
		STAP_PROBE_ASM(sw, asmargs, -1@%%ah 8@(%%rdx,%%rcx,8) -4@8(%%rdx,%%rcx,4) 2@%%ax 8@%%rcx)
		:
		: [arr] "m"(g_arr)
		: "rax", "rcx", "rdx", "memory");
	__asm__ __volatile__(STAP_PROBE_ASM(sw, badarg, 8@%%fs:0x28) ::: "memory");
}
#elif defined(__aarch64__)
/*
 * STAP_PROBE_ASM stringifies a single argument, and the commas of
 * "[x2, -8]" would make it several; given two, it takes the first as the
 * note's text already written in assembly, as STAP_PROBE_ASM_TEMPLATE
 * does: ARGS_TEXT writes that.
 */
#define ARGS_TEXT(...) ".ascii \"" #__VA_ARGS__ "\"\n", "ARGS_TEXT"

/*
 * x1 = 0x11223344fffffff6 (w1 = -10), x2 = &g_arr[1], x3 = -300, also
 * stored at [sp, 8] below a stack pointer lowered by 16 for the probe
 * (aarch64 has no red zone: the store must be above sp). GCC's templates
 * name x registers whatever the size, and libbpf knows only x0..x30 and
 * sp; "-4@w1" is for notes written by hand, which internal/usdt reads as
 * the low half of x1.
 */
__attribute__((noinline)) void asm_fire(void)
{
	__asm__ __volatile__(
		"mov x1, #0xfff6\n\t"
		"movk x1, #0xffff, lsl #16\n\t"
		"movk x1, #0x3344, lsl #32\n\t"
		"movk x1, #0x1122, lsl #48\n\t"
		"mov x2, %[arr]\n\t"
		"mov x3, #-300\n\t"
		"sub sp, sp, #16\n\t"
		"str x3, [sp, #8]\n\t"
		STAP_PROBE_ASM(sw, asmargs, ARGS_TEXT(8@x1 -4@w1 8@[x2, -8] 8@[x2] 8@[x2, 8] -2@[sp, 8] -4@-42 -1@x3))
		"add sp, sp, #16\n\t"
		:
		: [arr] "r"(&g_arr[1])
		: "x1", "x2", "x3", "memory");
	__asm__ __volatile__(STAP_PROBE_ASM(sw, badarg, ARGS_TEXT(8@[x1, x2, lsl 3])) ::: "memory");
}
#else
#error "sdtprog.c: asm_fire has probes for x86-64 and aarch64 only"
#endif

__attribute__((noinline)) void fire_all(long seed)
{
	uint8_t a0 = (uint8_t)(V0 + seed);
	int8_t a1 = (int8_t)(V1 + seed);
	uint16_t a2 = (uint16_t)(V2 + seed);
	int16_t a3 = (int16_t)(V3 + seed);
	uint32_t a4 = (uint32_t)(V4 + seed);
	int32_t a5 = (int32_t)(V5 + seed);
	uint64_t a6 = (uint64_t)(V6 + seed);
	int64_t a7 = (int64_t)(V7 + seed);
	int8_t a8 = (int8_t)(V8 + seed);
	int16_t a9 = (int16_t)(V9 + seed);
	int32_t a10 = (int32_t)(V10 + seed);
	int64_t a11 = (int64_t)(V11 + seed);

	STAP_PROBE(sw, a0);
	STAP_PROBE1(sw, a1, a0);
	STAP_PROBE2(sw, a2, a0, a1);
	STAP_PROBE3(sw, a3, a0, a1, a2);
	STAP_PROBE4(sw, a4, a0, a1, a2, a3);
	STAP_PROBE5(sw, a5, a0, a1, a2, a3, a4);
	STAP_PROBE6(sw, a6, a0, a1, a2, a3, a4, a5);
	STAP_PROBE7(sw, a7, a0, a1, a2, a3, a4, a5, a6);
	STAP_PROBE8(sw, a8, a0, a1, a2, a3, a4, a5, a6, a7);
	STAP_PROBE9(sw, a9, a0, a1, a2, a3, a4, a5, a6, a7, a8);
	STAP_PROBE10(sw, a10, a0, a1, a2, a3, a4, a5, a6, a7, a8, a9);
	STAP_PROBE11(sw, a11, a0, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10);
	STAP_PROBE12(sw, a12, a0, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, a11);

	STAP_PROBE8(sw, consts, (uint8_t)V0, (int8_t)V1, (uint16_t)V2, (int16_t)V3,
		    (uint32_t)V4, (int32_t)V5, (uint64_t)V6, (int64_t)V7);
	STAP_PROBE8(sw, mem, g_u8, g_s8, g_u16, g_s16, g_u32, g_s32, g_u64, g_s64);

	inl(-11 + seed, 11 + seed);
	if (seed == 0)
		inl(-22 * (seed + 1), (uint32_t)(22 + seed * 3));
	for (long i = 0; i < 1; i++)
		inl((int64_t)V7 + i + seed, V4 - (uint32_t)i);
}

int main(int argc, char **argv)
{
	long seed = argc > 1 ? atol(argv[1]) : 0;
	char line[16];

	setvbuf(stdout, NULL, _IONBF, 0);
	printf("ready sem=%u\n", sem_semaphore_value());
	if (!fgets(line, sizeof(line), stdin))
		return 1;
	printf("sem=%u\n", sem_semaphore_value());
	fire_all(seed);
	asm_fire();
	sem_fire(seed);
	nop5_fire(seed);
	lib_fire(seed);
	printf("done\n");
	return 0;
}
