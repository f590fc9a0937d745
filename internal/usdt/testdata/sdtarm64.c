/*
 * USDT probes as GCC writes them for aarch64: arguments in registers
 * (x and w), on the stack ([sp, N]), behind pointers ([xN, N]),
 * constants, and a variable addressed by its page and ":lo12:" offset.
 * TestOpenARM64Program cross-compiles it (aarch64-linux-gnu-gcc) and
 * parses every note's arguments.
 */
#include <stdint.h>
#include <sys/sdt.h>

struct ev {
	uint64_t a;
	int32_t b;
	uint8_t c;
	const char *s;
};

static volatile struct ev g_ev;

__attribute__((noinline)) void work(long x, int y, short z, char c, const char *s, struct ev *e, unsigned long long u)
{
	DTRACE_PROBE(sw, a0);
	DTRACE_PROBE1(sw, a1, x);
	DTRACE_PROBE2(sw, a2, y, z);
	DTRACE_PROBE3(sw, a3, c, s, e->a);
	DTRACE_PROBE4(sw, a4, e->b, e->c, u, 5);
	DTRACE_PROBE5(sw, a5, -1, g_ev.a, g_ev.b, (unsigned char)x, x + y);
	DTRACE_PROBE6(sw, a6, x, y, z, c, s, e);
	DTRACE_PROBE12(sw, a12, x, y, z, c, s, e, u, x + 1, y + 2, z + 3, e->b, g_ev.c);
}

int main(int argc, char **argv)
{
	struct ev e = {argc, argc * 2, 3, argv[0]};

	work(argc, argc + 1, argc + 2, argv[0][0], argv[0], &e, (unsigned long long)argv);
	return 0;
}
