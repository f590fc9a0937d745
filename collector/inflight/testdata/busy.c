/* A test program whose span never ends in time: main -> a -> b -> c -> slow,
 * built with -O0 -g -fno-omit-frame-pointer. slow runs until stdin closes,
 * either on the CPU ("spin": a busy loop) or off it ("nap": 5 ms sleeps in
 * poll), so the in-flight sampler can catch it either way. */
#include <poll.h>
#include <stdio.h>
#include <string.h>

static int spin;

__attribute__((noinline)) void slow(void)
{
	struct pollfd p = {.fd = 0, .events = POLLIN};

	for (;;) {
		if (spin)
			for (volatile long i = 0; i < 20000000; i++)
				;
		if (poll(&p, 1, spin ? 0 : 5) > 0)
			return;
	}
}

__attribute__((noinline)) void c(void) { slow(); }
__attribute__((noinline)) void b(void) { c(); }
__attribute__((noinline)) void a(void) { b(); }

int main(int argc, char **argv)
{
	spin = argc > 1 && strcmp(argv[1], "spin") == 0;
	printf("ready\n");
	fflush(stdout);
	a();
	return 0;
}
