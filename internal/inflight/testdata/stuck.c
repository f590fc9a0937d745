/* A span that gets stuck: main -> a -> b -> c -> slow between the USDT
 * probes sw:t_start and sw:t_done, built with -O0 -g
 * -fno-omit-frame-pointer and sys/sdt.h. It prints "ready", starts the
 * span, and blocks in slow (5 ms polls) until stdin closes; then the span
 * ends. */
#include <poll.h>
#include <stdio.h>
#include <sys/sdt.h>

__attribute__((noinline)) void slow(void)
{
	struct pollfd p = {.fd = 0, .events = POLLIN};

	while (poll(&p, 1, 5) == 0)
		;
}

__attribute__((noinline)) void c(void) { slow(); }
__attribute__((noinline)) void b(void) { c(); }
__attribute__((noinline)) void a(void) { b(); }

int main(void)
{
	printf("ready\n");
	fflush(stdout);
	STAP_PROBE(sw, t_start);
	a();
	STAP_PROBE1(sw, t_done, 0);
	return 0;
}
