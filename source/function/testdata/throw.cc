// Abandons traced calls by C++ exceptions, for source/function's tests:
// built with g++ and Debian's default flags (-O2 -g
// -fstack-protector-strong). Usage: throw THREADS CALLS SLEEP_MS BUDGET_MS. Prints
// "ready", waits for a line on standard input, then each of THREADS
// threads calls top() CALLS times; top calls a, a calls b, b calls leaf,
// and leaf, by the call's number:
//   most calls:     returns at once;
//   every 100th:    sleeps SLEEP_MS and returns (a slow normal return);
//   every 100th+25: sleeps and throws an int, caught in b (leaf
//                   abandoned);
//   every 100th+50: sleeps and throws a std::runtime_error, caught in top
//                   three levels up (leaf, b and a abandoned; a and b run
//                   a destructor on the way: a cleanup in a traced frame).
// The functions that catch return normally. The last call of each thread
// is a fast one. The caller times each call that returns (from before the
// call to after it: more than its span). Then it prints, per function, the
// calls that returned, those of them that slept, those that took BUDGET_MS
// or more, and the calls abandoned ("leaf RETURNED SLEPT OVER ABANDONED"),
// and "done".
#include <pthread.h>
#include <time.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <stdexcept>
#include <thread>
#include <vector>

enum { LEAF, B, A, TOP, NFUNCS };
static const char *names[NFUNCS] = {"leaf", "b", "a", "top"};

static std::atomic<long> returned[NFUNCS], slow[NFUNCS], over[NFUNCS], abandoned[NFUNCS];
static int calls, sleep_ms;
static long budget_ns;
static thread_local int slept;
volatile int sink;

// Guard counts the calls its frame is left by an exception.
struct Guard {
	int fn;
	bool done = false;
	explicit Guard(int f) : fn(f) {}
	~Guard()
	{
		if (!done)
			abandoned[fn]++;
	}
};

static long now()
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1000000000L + ts.tv_nsec;
}

// count counts a call of fn that returned, started at t0.
static void count(int fn, long t0)
{
	long d = now() - t0;
	returned[fn]++;
	if (slept)
		slow[fn]++;
	if (d >= budget_ns)
		over[fn]++;
}

static void nap()
{
	struct timespec ts = {sleep_ms / 1000, (long)(sleep_ms % 1000) * 1000000};
	nanosleep(&ts, nullptr);
	slept = 1;
}

__attribute__((noipa)) int leaf(int i)
{
	switch (i % 100) {
	case 99:
		nap();
		break;
	case 24:
		nap();
		abandoned[LEAF]++;
		throw i;
	case 49:
		nap();
		abandoned[LEAF]++;
		throw std::runtime_error("unwind");
	}
	sink = i;
	return i + 1;
}

__attribute__((noipa)) int b(int i)
{
	Guard g(B);
	int r;
	long t0 = now();
	try {
		r = leaf(i);
	} catch (int) {
		g.done = true;
		return -1;
	}
	count(LEAF, t0);
	g.done = true;
	return r * 2;
}

__attribute__((noipa)) int a(int i)
{
	Guard g(A);
	long t0 = now();
	int r = b(i);
	count(B, t0);
	g.done = true;
	return r + 5;
}

__attribute__((noipa)) int top(int i)
{
	slept = 0;
	try {
		long t0 = now();
		int r = a(i);
		count(A, t0);
		return r;
	} catch (const std::runtime_error &) {
		return -1;
	}
}

int main(int argc, char **argv)
{
	if (argc != 5) {
		std::fprintf(stderr, "usage: throw THREADS CALLS SLEEP_MS BUDGET_MS\n");
		return 2;
	}
	int threads = std::atoi(argv[1]);
	calls = std::atoi(argv[2]);
	sleep_ms = std::atoi(argv[3]);
	budget_ns = std::atol(argv[4]) * 1000000L;
	if (calls % 100 != 0)
		calls += 100 - calls % 100; // end each thread on a fast call
	std::printf("ready\n");
	std::fflush(stdout);
	char line[16];
	if (!std::fgets(line, sizeof(line), stdin))
		return 1;
	std::vector<std::thread> ts;
	for (int t = 0; t < threads; t++)
		ts.emplace_back([] {
			for (int i = 0; i < calls; i++) {
				long t0 = now();
				top(i);
				count(TOP, t0);
			}
		});
	for (auto &t : ts)
		t.join();
	for (int f = 0; f < NFUNCS; f++)
		std::printf("%s %ld %ld %ld %ld\n", names[f], returned[f].load(), slow[f].load(), over[f].load(), abandoned[f].load());
	std::printf("done\n");
	std::fflush(stdout);
	return 0;
}
