// redzone.c: a C leaf function that keeps its locals in the x86-64 red
// zone (the 128 bytes below %rsp that the System V ABI lets a function
// use without moving %rsp), with a five-byte nop between their stores and
// their loads: the site TestNop5RedZone uprobes. Built with gcc -O2 by the
// test; each call reports whether its locals survived the nop.
#include <stdio.h>
#include <stdlib.h>

__attribute__((noinline)) static long leaf(long a)
{
	volatile long x = a * 3, y = a + 7, z = a ^ 0x5a5a, w = ~a;

	__asm__ volatile(".globl redzone_site\n"
			 ".type redzone_site, @function\n"
			 "redzone_site:\n"
			 ".byte 0x0f, 0x1f, 0x44, 0x00, 0x00\n"
			 ".size redzone_site, 5\n");
	return (x != a * 3) + (y != a + 7) + (z != (a ^ 0x5a5a)) + (w != ~a);
}

extern char redzone_site[];

int main(int argc, char **argv)
{
	long n = argc > 1 ? atol(argv[1]) : 1000, clobbered = 0, i;

	for (i = 0; i < n; i++)
		clobbered += leaf(i) != 0;
	printf("calls %ld clobbered %ld site %02x\n", n, clobbered, (unsigned char)redzone_site[0]);
	return 0;
}
