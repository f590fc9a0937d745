/*
 * Spans from USDT probes, for the collector's USDT test. Built by the test
 * with sys/sdt.h and frame pointers. Usage: sdtspan ITER BASE_US. It prints
 * "ready", waits for a line on stdin, then:
 *
 *   tspan   ITER start/done pairs on this thread (sw:t_start, sw:t_done
 *           with status = i%5==0), sleeping BASE_US * 1, 2, 5 or 6 between
 *           (i%4 picks; the gap leaves room for a budget between them);
 *           prints "t INNER OUTER" per span: the time between the probes
 *           seen from just inside them and from just outside them, so
 *           the span's true duration lies between the two even when the
 *           process is preempted next to a probe.
 *   keyed   ITER spans as ITER/2 interleaved pairs of ids on this thread
 *           (sw:k_start(id, "keyed"), sw:k_done(id, 0)); "k INNER OUTER".
 *   single  ITER hits of sw:single("single", 1000 * (i+1) ns, i%2).
 *
 * and prints "done".
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <sys/sdt.h>

static int64_t now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static void sleep_us(long us)
{
	struct timespec ts = {us / 1000000, (us % 1000000) * 1000};
	nanosleep(&ts, NULL);
}

static const char keyed_name[] = "keyed";
static const char single_name[] = "single";

__attribute__((noinline)) void thread_spans(int iter, long base)
{
	for (int i = 0; i < iter; i++) {
		int32_t status = i % 5 == 0;
		static const int mult[4] = {1, 2, 5, 6};
		int64_t t0 = now_ns();
		STAP_PROBE(sw, t_start);
		int64_t t0i = now_ns();
		sleep_us(base * mult[i % 4]);
		int64_t t1i = now_ns();
		STAP_PROBE1(sw, t_done, status);
		int64_t t1 = now_ns();
		printf("t %lld %lld\n", (long long)(t1i - t0i), (long long)(t1 - t0));
	}
}

__attribute__((noinline)) void keyed_spans(int iter, long base)
{
	for (int i = 0; i < iter / 2; i++) {
		uint64_t a = 2 * i + 1, b = 2 * i + 2;
		int64_t ta = now_ns();
		STAP_PROBE2(sw, k_start, a, keyed_name);
		int64_t tai = now_ns();
		sleep_us(base);
		int64_t tb = now_ns();
		STAP_PROBE2(sw, k_start, b, keyed_name);
		int64_t tbi = now_ns();
		sleep_us(base * (1 + i % 3));
		int64_t eai = now_ns();
		STAP_PROBE2(sw, k_done, a, 0);
		int64_t ea = now_ns();
		sleep_us(base);
		int64_t ebi = now_ns();
		STAP_PROBE2(sw, k_done, b, 0);
		int64_t eb = now_ns();
		printf("k %lld %lld\nk %lld %lld\n", (long long)(eai - tai), (long long)(ea - ta),
		       (long long)(ebi - tbi), (long long)(eb - tb));
	}
}

__attribute__((noinline)) void single_spans(int iter)
{
	for (int i = 0; i < iter; i++) {
		uint64_t d = 1000 * (uint64_t)(i + 1);
		int status = i % 2;
		STAP_PROBE3(sw, single, single_name, d, status);
	}
}

int main(int argc, char **argv)
{
	char line[16];
	if (argc < 3)
		return 2;
	int iter = atoi(argv[1]);
	long base = atol(argv[2]);
	setvbuf(stdout, NULL, _IOLBF, 0);
	printf("ready\n");
	if (!fgets(line, sizeof(line), stdin))
		return 1;
	thread_spans(iter, base);
	keyed_spans(iter, base);
	single_spans(iter);
	printf("done\n");
	return 0;
}
