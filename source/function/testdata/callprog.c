// Calls functions a known number of times, for source/function's tests:
// built with gcc -O2. Prints "ready", waits for a line on standard input,
// makes its calls on 4 threads, then calls slow() 20 times, every other
// call sleeping 200 ms, and prints "done".
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

volatile int sink;

__attribute__((noipa)) int leaf(int x)
{
	sink = x;
	return x * 3;
}

// Five return instructions under gcc -O2, one per path.
__attribute__((noipa)) int multi_ret(int x)
{
	if (x < 0)
		return -1;
	sink = x;
	switch (x & 3) {
	case 0:
		return leaf(x) + 1;
	case 1:
		return leaf(x) * 7;
	case 2:
		return leaf(leaf(x)) - 5;
	}
	return x;
}

// Recursion: depth + 1 calls, each returning through its own frame.
__attribute__((noipa)) int rec(int depth)
{
	if (depth == 0) {
		sink = 0;
		return 0;
	}
	int r = rec(depth - 1);
	asm volatile("" : "+r"(r) : : "memory");
	return r + 1;
}

// slow sleeps us microseconds.
__attribute__((noipa)) int slow(int us)
{
	if (us)
		usleep(us);
	sink = us;
	return us;
}

static int calls;

static void *work(void *arg)
{
	(void)arg;
	for (int i = 0; i < calls; i++) {
		multi_ret(i - 1); /* -1 first: every path */
		/* Every tenth call 41 deep: more open calls than a thread's
		 * table of entries holds (bpf/funcs.bpf.c, func_threads), so
		 * some go to func_open and pair from there. */
		rec(i % 10 ? 5 : 40);
	}
	return NULL;
}

int main(int argc, char **argv)
{
	pthread_t t[4];
	char line[16];

	calls = argc > 1 ? atoi(argv[1]) : 100;
	printf("ready\n");
	fflush(stdout);
	if (!fgets(line, sizeof(line), stdin))
		return 1;
	for (int i = 0; i < 4; i++)
		pthread_create(&t[i], NULL, work, NULL);
	for (int i = 0; i < 4; i++)
		pthread_join(t[i], NULL);
	for (int i = 0; i < 20; i++)
		slow(i % 2 ? 200000 : 0);
	printf("done\n");
	fflush(stdout);
	return 0;
}
