/*
 * A service as its authors would build it, with nothing done for
 * spanwatch: plain gcc -O2 -g -fno-omit-frame-pointer, sys/sdt.h probes.
 * The route names are string literals used nowhere but in the probe: they
 * sit in .rodata (a segment of its own under gcc's default
 * -z separate-code), on a page the process itself never reads, so a probe
 * that reads them finds the page absent until something faults it in. To
 * keep it so, the program reads no other string constant near them: its
 * I/O formats numbers by hand and its commands are told apart by their
 * first letter.
 *
 * Probes:
 *   svc:request__start(const char *route)
 *   svc:request__done(int32 status, int64 bytes)
 *   svc:queue(int64 delta)                  a signed quantity
 *   svc:rec__enter(int32 depth)             recursion, paired by thread
 *   svc:rec__exit(int32 depth)
 *   svc:op__start, svc:op__done             two spans of different sources
 *   svc:txn__start, svc:txn__done           that interleave on one thread
 *
 * Commands, one per line on stdin; each prints its records then "ok":
 *   r N BASE_US    N requests: route i % 4 (0 "GET /api/orders",
 *                  1 "POST /api/orders/{id}/pay", 2 "GET /api/health",
 *                  3 "GET /slow"), status statuses[i % 12], each sleeping
 *                  BASE_US, or 25 times that for every third request of
 *                  route 0 and every fifth of route 3; prints
 *                  "r ROUTE STATUS INNER OUTER" per request (ns, the time
 *                  between the probes from just inside and just outside)
 *   q N            N hits of svc:queue with delta (i % 7) - 3;
 *                  prints "q SUM MIN MAX"
 *   d D R BASE_US  R rounds of a recursion D deep, each level sleeping
 *                  BASE_US before and after the next one; prints
 *                  "d DEPTH INNER OUTER" per level and round
 *   x N BASE_US    N rounds of op__start, txn__start, (sleep BASE_US),
 *                  op__done, (sleep 2 * BASE_US), txn__done: the op span
 *                  ends inside the txn span that began after it; prints
 *                  "x OP_INNER OP_OUTER TXN_INNER TXN_OUTER" per round
 *   m I            prints one of the rarely read messages
 *   z              drops the process's mapping of the pages holding the
 *                  route names (madvise MADV_DONTNEED: the next read
 *                  faults them in again), so a probe finds them absent
 *                  whatever fault-around or readahead mapped before
 *   b N            N hits of svc:request__start and svc:request__done
 *                  whose name pointer points at nothing (address 16)
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/mman.h>
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

/* Output without string constants: a line buffer and hand-made numbers. */
static char out[4096];
static size_t outn;

static void put_c(char c)
{
	if (outn < sizeof(out))
		out[outn++] = c;
}

static void put_i(long long v)
{
	char d[24];
	int n = 0;
	unsigned long long u = v < 0 ? -(unsigned long long)v : (unsigned long long)v;

	if (v < 0)
		put_c('-');
	do {
		d[n++] = '0' + u % 10;
		u /= 10;
	} while (u);
	while (n)
		put_c(d[--n]);
}

static void flush(void)
{
	put_c('\n');
	if (write(1, out, outn) < 0)
		exit(1);
	outn = 0;
}

static void put_ok(void)
{
	put_c('o');
	put_c('k');
	flush();
}

/* Messages a real service would have: read-only data it rarely reads. */
__attribute__((noinline)) const char *rare_message(int i)
{
	switch (i) {
#define M(n) case n: return "message " #n ": a long text the service would print only when something rare happened, padding its read-only data past a page";
	M(0) M(1) M(2) M(3) M(4) M(5) M(6) M(7) M(8) M(9) M(10) M(11) M(12) M(13) M(14) M(15)
	M(16) M(17) M(18) M(19) M(20) M(21) M(22) M(23) M(24) M(25) M(26) M(27) M(28) M(29) M(30) M(31)
	M(32) M(33) M(34) M(35) M(36) M(37) M(38) M(39) M(40) M(41) M(42) M(43) M(44) M(45) M(46) M(47)
	M(48) M(49) M(50) M(51) M(52) M(53) M(54) M(55) M(56) M(57) M(58) M(59) M(60) M(61) M(62) M(63)
#undef M
	}
	return "";
}

__attribute__((noinline)) int32_t handle_request(int i, long base)
{
	int route = i % 4;
	/* The status, computed (a table would be read-only data too). */
	int k = i % 12;
	int32_t status = k == 1 ? 404 : k == 2 ? 500 : k == 4 ? 503 : k == 5 ? 201 : k == 7 ? 499 : k == 8 ? 502 : k == 10 ? 301 : 200;
	int64_t bytes = 100 * (i % 9) - 300;
	long sleep = base;
	int64_t t0, t0i, t1i, t1;

	if ((route == 0 && i % 3 == 0) || (route == 3 && i % 5 == 0))
		sleep = 25 * base;
	t0 = now_ns();
	if (route == 0)
		STAP_PROBE1(svc, request__start, "GET /api/orders");
	else if (route == 1)
		STAP_PROBE1(svc, request__start, "POST /api/orders/{id}/pay");
	else if (route == 2)
		STAP_PROBE1(svc, request__start, "GET /api/health");
	else
		STAP_PROBE1(svc, request__start, "GET /slow");
	t0i = now_ns();
	sleep_us(sleep);
	t1i = now_ns();
	STAP_PROBE2(svc, request__done, status, bytes);
	t1 = now_ns();
	put_c('r');
	put_c(' ');
	put_i(route);
	put_c(' ');
	put_i(status);
	put_c(' ');
	put_i(t1i - t0i);
	put_c(' ');
	put_i(t1 - t0);
	flush();
	return status;
}

/* zap drops the pages of the route names from the process's page table.
 * It takes their address only; it reads nothing there. */
__attribute__((noinline)) void zap(void)
{
	uintptr_t a[4] = {(uintptr_t) "GET /api/orders", (uintptr_t) "POST /api/orders/{id}/pay",
			  (uintptr_t) "GET /api/health", (uintptr_t) "GET /slow"};
	uintptr_t lo = a[0], hi = a[0];

	for (int i = 1; i < 4; i++) {
		lo = a[i] < lo ? a[i] : lo;
		hi = a[i] > hi ? a[i] : hi;
	}
	lo &= ~(uintptr_t)4095;
	hi = (hi + 32 + 4095) & ~(uintptr_t)4095;
	if (madvise((void *)lo, hi - lo, MADV_DONTNEED))
		exit(3);
}

__attribute__((noinline)) void bad_names(int n)
{
	for (int i = 0; i < n; i++) {
		STAP_PROBE1(svc, request__start, (const char *)16);
		STAP_PROBE2(svc, request__done, 200, (int64_t)0);
	}
}

__attribute__((noinline)) void serve(int n, long base)
{
	for (int i = 0; i < n; i++)
		handle_request(i, base);
}

__attribute__((noinline)) void queue(int n)
{
	int64_t sum = 0, min = INT64_MAX, max = INT64_MIN;

	for (int i = 0; i < n; i++) {
		int64_t delta = (i % 7) - 3;
		STAP_PROBE1(svc, queue, delta);
		sum += delta;
		if (delta < min)
			min = delta;
		if (delta > max)
			max = delta;
	}
	put_c('q');
	put_c(' ');
	put_i(sum);
	put_c(' ');
	put_i(min);
	put_c(' ');
	put_i(max);
	flush();
}

__attribute__((noinline)) void rec(int32_t depth, int32_t max, long base)
{
	int64_t t0, t0i, t1i, t1;

	t0 = now_ns();
	STAP_PROBE1(svc, rec__enter, depth);
	t0i = now_ns();
	sleep_us(base);
	if (depth + 1 < max)
		rec(depth + 1, max, base);
	sleep_us(base);
	t1i = now_ns();
	STAP_PROBE1(svc, rec__exit, depth);
	t1 = now_ns();
	put_c('d');
	put_c(' ');
	put_i(depth);
	put_c(' ');
	put_i(t1i - t0i);
	put_c(' ');
	put_i(t1 - t0);
	flush();
}

__attribute__((noinline)) void interleave(int n, long base)
{
	for (int i = 0; i < n; i++) {
		int64_t a0 = now_ns();
		STAP_PROBE(svc, op__start);
		int64_t a0i = now_ns();
		int64_t b0 = now_ns();
		STAP_PROBE(svc, txn__start);
		int64_t b0i = now_ns();
		sleep_us(base);
		int64_t a1i = now_ns();
		STAP_PROBE(svc, op__done);
		int64_t a1 = now_ns();
		sleep_us(2 * base);
		int64_t b1i = now_ns();
		STAP_PROBE(svc, txn__done);
		int64_t b1 = now_ns();
		put_c('x');
		put_c(' ');
		put_i(a1i - a0i);
		put_c(' ');
		put_i(a1 - a0);
		put_c(' ');
		put_i(b1i - b0i);
		put_c(' ');
		put_i(b1 - b0);
		flush();
	}
}

/* next_int parses the next decimal number of a line. */
static long next_int(char **p)
{
	while (**p == ' ')
		(*p)++;
	return strtol(*p, p, 10);
}

int main(void)
{
	char line[128];
	size_t n = 0;
	char c;

	put_c('r');
	put_c('e');
	put_c('a');
	put_c('d');
	put_c('y');
	flush();
	while (read(0, &c, 1) == 1) {
		if (c != '\n') {
			if (n < sizeof(line) - 1)
				line[n++] = c;
			continue;
		}
		line[n] = 0;
		n = 0;
		char *p = line + 1;
		if (line[0] == 'r') {
			long k = next_int(&p), base = next_int(&p);
			serve(k, base);
		} else if (line[0] == 'q') {
			queue(next_int(&p));
		} else if (line[0] == 'd') {
			long d = next_int(&p), r = next_int(&p), base = next_int(&p);
			for (long i = 0; i < r; i++)
				rec(0, d, base);
		} else if (line[0] == 'x') {
			long k = next_int(&p), base = next_int(&p);
			interleave(k, base);
		} else if (line[0] == 'z') {
			zap();
		} else if (line[0] == 'b') {
			bad_names(next_int(&p));
		} else if (line[0] == 'm') {
			const char *m = rare_message(next_int(&p) % 64);
			while (*m)
				put_c(*m++);
			flush();
		}
		put_ok();
	}
	return 0;
}
