/* A test program with a known call chain main -> a -> b -> c -> slow,
 * built by the tests with -O0 -g -fno-omit-frame-pointer. slow blocks until
 * stdin is closed, so a test can capture the stack while it runs and let
 * it exit afterwards. */
#include <stdio.h>
#include <unistd.h>

__attribute__((noinline)) void slow(void)
{
	char buf[1]; /* line:slow */
	while (read(0, buf, 1) > 0)
		;
}

__attribute__((noinline)) void c(void)
{
	slow(); /* call:c */
}

__attribute__((noinline)) void b(void)
{
	c(); /* call:b */
}

__attribute__((noinline)) void a(void)
{
	b(); /* call:a */
}

int main(void)
{
	printf("ready\n");
	fflush(stdout);
	a(); /* call:main */
	return 0;
}
