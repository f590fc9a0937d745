/* The C program of TestArgsC: handle(status, route) is called with
 * every (status, route) pair equally often, and returns -1 for the 503s.
 * Built with gcc -O2 by the test. */
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

__attribute__((noinline)) int handle(int status, const char *route)
{
	if (status >= 500)
		return -1;
	return (int)strlen(route) + status;
}

int main(int argc, char **argv)
{
	long n = argc > 1 ? atol(argv[1]) : 9;
	volatile long sink = 0;
	char line[16];

	/* Touch the strings, so that their read-only page is resident when
	 * the entry probe reads them: a string on a page that is not is
	 * keyed "other" (label_unread), DESIGN.md's facts. */
	for (int i = 0; i < 3; i++)
		sink += strlen(routes[i]);
	printf("ready\n");
	fflush(stdout);
	if (!fgets(line, sizeof(line), stdin))
		return 1;
	for (long i = 0; i < n; i++)
		sink += handle(statuses[i % 3], routes[(i / 3) % 3]);
	printf("done\n");
	fflush(stdout);
	return 0;
}
