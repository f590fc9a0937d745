// Abandons traced calls by longjmp, for source/function's tests: built
// with gcc and Debian's default flags (-O2 -g -fstack-protector-strong).
// Usage: longjmp THREADS CALLS SLEEP_MS BUDGET_MS. Prints "ready", waits for a line
// on standard input, then each of THREADS threads calls top() CALLS
// times; top calls mid, mid calls leaf, and leaf, by the call's number:
//   most calls:   returns at once;
//   every 100th:  sleeps SLEEP_MS and returns (a slow normal return);
//   every 100th+25: sleeps and longjmps to mid's setjmp (leaf abandoned);
//   every 100th+50: sleeps and longjmps to top's setjmp (mid and leaf
//                   abandoned).
// mid and top return normally after a longjmp lands in them. The last
// call of each thread is a fast one, so every abandoned entry is followed
// by a call at the same place. The caller times each call that returns
// (from before the call to after it: more than its span). Then it prints,
// per function, the calls that returned, those of them that slept, those
// that took BUDGET_MS or more, and the calls abandoned ("leaf RETURNED
// SLEPT OVER ABANDONED"), and "done".
#include <pthread.h>
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

enum { LEAF, MID, TOP, NFUNCS };
static const char *names[NFUNCS] = {"leaf", "mid", "top"};

static long returned[NFUNCS], slow[NFUNCS], over[NFUNCS], abandoned[NFUNCS];
static int calls, sleep_ms;
static long budget_ns;
volatile int sink;

struct state {
	jmp_buf mid_env, top_env;
	int slept;
};
static __thread struct state st;

static void nap(void)
{
	struct timespec ts = {sleep_ms / 1000, (long)(sleep_ms % 1000) * 1000000};
	nanosleep(&ts, NULL);
	st.slept = 1;
}

__attribute__((noipa)) int leaf(int i)
{
	switch (i % 100) {
	case 99:
		nap();
		break;
	case 24:
		nap();
		longjmp(st.mid_env, 1);
	case 49:
		nap();
		longjmp(st.top_env, 1);
	}
	sink = i;
	return i + 1;
}

static long now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1000000000L + ts.tv_nsec;
}

// count counts a call of fn that returned, started at t0.
static void count(int fn, long t0)
{
	long d = now() - t0;

	__atomic_fetch_add(&returned[fn], 1, __ATOMIC_RELAXED);
	if (st.slept)
		__atomic_fetch_add(&slow[fn], 1, __ATOMIC_RELAXED);
	if (d >= budget_ns)
		__atomic_fetch_add(&over[fn], 1, __ATOMIC_RELAXED);
}

__attribute__((noipa)) int mid(int i)
{
	volatile int r = 0;

	if (setjmp(st.mid_env)) {
		__atomic_fetch_add(&abandoned[LEAF], 1, __ATOMIC_RELAXED);
		return -1;
	}
	long t0 = now();
	r = leaf(i);
	count(LEAF, t0);
	return r * 2;
}

__attribute__((noipa)) int top(int i)
{
	volatile int r = 0;

	st.slept = 0;
	if (setjmp(st.top_env)) {
		__atomic_fetch_add(&abandoned[LEAF], 1, __ATOMIC_RELAXED);
		__atomic_fetch_add(&abandoned[MID], 1, __ATOMIC_RELAXED);
		return -1;
	}
	long t0 = now();
	r = mid(i);
	count(MID, t0);
	return r + 3;
}

static void *work(void *arg)
{
	(void)arg;
	for (int i = 0; i < calls; i++) {
		long t0 = now();
		top(i);
		count(TOP, t0);
	}
	return NULL;
}

int main(int argc, char **argv)
{
	char line[16];

	if (argc != 5) {
		fprintf(stderr, "usage: longjmp THREADS CALLS SLEEP_MS BUDGET_MS\n");
		return 2;
	}
	int threads = atoi(argv[1]);
	calls = atoi(argv[2]);
	sleep_ms = atoi(argv[3]);
	budget_ns = atol(argv[4]) * 1000000L;
	if (calls % 100 != 0)
		calls += 100 - calls % 100; /* end each thread on a fast call */
	pthread_t *t = calloc(threads, sizeof(*t));
	printf("ready\n");
	fflush(stdout);
	if (!fgets(line, sizeof(line), stdin))
		return 1;
	for (int i = 0; i < threads; i++)
		pthread_create(&t[i], NULL, work, NULL);
	for (int i = 0; i < threads; i++)
		pthread_join(t[i], NULL);
	for (int f = 0; f < NFUNCS; f++)
		printf("%s %ld %ld %ld %ld\n", names[f], returned[f], slow[f], over[f], abandoned[f]);
	printf("done\n");
	fflush(stdout);
	return 0;
}
