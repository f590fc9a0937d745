/* The C program of TestParamsC and TestPlaceParams: handle(code, path,
 * n) is called with every (code, path) pair equally often, and returns
 * -1 for the 503s, as argsprog.c's handle does; the other functions have
 * parameters that are placed otherwise, or refused. Built with gcc -O2
 * (-g, or not) by the tests. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const routes[] = {
	"/checkout",
	"/cart",
	/* 70 bytes: a string label keeps its first 64. */
	"/a/route/longer/than/the/sixty-four/bytes/a/string/label/keeps/xxxxxx",
};
static const int statuses[] = {200, 404, 503};

struct pair {
	long a, b;
};
struct big {
	long x[4];
};
enum level { LOW = 1, HIGH = 2 };
typedef unsigned short port_t;

__attribute__((noipa)) int handle(int code, const char *path, long n)
{
	if (code >= 500)
		return -1;
	return (int)strlen(path) + code + (int)(n & 1);
}

/* A struct of two eightbytes by value: in two registers, by its
 * fields' classes. */
__attribute__((noipa)) long after_pair(struct pair p, int code)
{
	return p.a + p.b + code;
}

/* Larger than 16 bytes: on the stack; s is in the first register. */
__attribute__((noipa)) long after_big(struct big b, short s)
{
	return b.x[0] + b.x[3] + s;
}

/* A double is in xmm0: flags is in the first integer register, level
 * in the second, port in the third. */
__attribute__((noipa)) long with_float(double x, unsigned flags, enum level lv, port_t port, unsigned char *buf)
{
	return (long)x + flags + lv + port + buf[0];
}

/* A struct larger than 16 bytes returned: its address takes rdi. */
__attribute__((noipa)) struct big ret_big(long v, int w)
{
	struct big b = {{v, w, v, w}};
	return b;
}

int main(int argc, char **argv)
{
	long n = argc > 1 ? atol(argv[1]) : 9;
	volatile long sink = 0;
	char line[16];
	struct pair p = {1, 2};
	struct big b = {{1, 2, 3, 4}};
	unsigned char buf[1] = {1};

	for (int i = 0; i < 3; i++)
		sink += strlen(routes[i]);
	sink += after_pair(p, 1) + after_big(b, 2) + with_float(1.5, 3, HIGH, 80, buf) + ret_big(4, 5).x[1];
	printf("ready\n");
	fflush(stdout);
	if (!fgets(line, sizeof(line), stdin))
		return 1;
	for (long i = 0; i < n; i++)
		sink += handle(statuses[i % 3], routes[(i / 3) % 3], i);
	printf("done\n");
	fflush(stdout);
	return 0;
}
