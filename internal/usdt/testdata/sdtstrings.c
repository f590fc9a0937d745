/*
 * Span names from string arguments as runtimes pass them, for the
 * collector's TestUSDTStringNames: as the JVM's hotspot:method__entry
 * passes a class and a method, each a pointer and a length into memory
 * where no NUL follows the string. Usage: sdtstrings. It prints "ready",
 * waits for a line on stdin, fires the probes below and prints "done".
 *
 *   sw:m_entry / sw:m_return (depth, class, class_len, method, method_len),
 *   lengths as int:
 *     java/lang/String.charAt         10 times, then 5 more around
 *     java/lang/StringBuilder.append  5 times, nested in those 5
 *     java/lang/StringBuilder.charAt  7 times
 *     125 x's, ".", "charAt"          3 times (132 bytes: cut at 127)
 *   sw:str (ptr, len), len as long:
 *     "charAt"                        4 times
 *     pool + 51, length 2^40          2 times (clamped to the name)
 *     "charAt", length -1             3 times (a bad length)
 *     length 0                        1 time
 *   sw:k_entry (id, verb, ptr, len), sw:k_return (id): a NUL-terminated
 *   string and a pointer and length, paired by id:
 *     "GET", java/lang/String         6 times, 3 pairs interleaved at a time
 *   sw:q_start (id, kind), sw:q_done (id, status): labels from both ends,
 *   paired by thread:
 *     i = 0..11: kind i % 3, status i % 2; around each i % 4 == 0, one
 *     nested pair of kind 7, status 0 (3 times)
 *   sw:r_start (id, kind), sw:r_done (id, status), paired by id, 3 at a
 *   time interleaved: ids 1..6, kind id % 2, status id % 3 == 0
 */
#include <stdio.h>
#include <string.h>
#include <sys/sdt.h>

/* Every string is a slice of pool, with no NUL after it: the old
 * NUL-terminated read would run on into the next one. */
static char pool[512];

#define STRING 0
#define CHARAT 16
#define BUILDER 22
#define APPEND 45
#define XS 51

static void call(const char *c, int cl, const char *m, int ml, int depth)
{
	STAP_PROBE5(sw, m_entry, depth, c, cl, m, ml);
	if (depth > 0)
		call(pool + BUILDER, 23, pool + APPEND, 6, depth - 1);
	STAP_PROBE5(sw, m_return, depth, c, cl, m, ml);
}

static void str(const char *p, long len)
{
	STAP_PROBE2(sw, str, p, len);
}

int main(void)
{
	char line[16];
	char verb[] = "GET";

	memset(pool, 'x', sizeof(pool));
	memcpy(pool + STRING, "java/lang/String", 16);
	memcpy(pool + CHARAT, "charAt", 6);
	memcpy(pool + BUILDER, "java/lang/StringBuilder", 23);
	memcpy(pool + APPEND, "append", 6);
	printf("ready\n");
	fflush(stdout);
	if (!fgets(line, sizeof(line), stdin))
		return 1;
	for (int i = 0; i < 10; i++)
		call(pool + STRING, 16, pool + CHARAT, 6, 0);
	for (int i = 0; i < 5; i++)
		call(pool + STRING, 16, pool + CHARAT, 6, 1);
	for (int i = 0; i < 7; i++)
		call(pool + BUILDER, 23, pool + CHARAT, 6, 0);
	for (int i = 0; i < 3; i++)
		call(pool + XS, 125, pool + CHARAT, 6, 0);
	for (int i = 0; i < 4; i++)
		str(pool + CHARAT, 6);
	for (int i = 0; i < 2; i++)
		str(pool + XS, 1L << 40);
	for (int i = 0; i < 3; i++)
		str(pool + CHARAT, -1);
	str(pool + CHARAT, 0);
	for (long id = 1; id <= 6; id += 3) {
		for (long k = id; k < id + 3; k++)
			STAP_PROBE4(sw, k_entry, k, verb, pool + STRING, 16);
		for (long k = id + 2; k >= id; k--)
			STAP_PROBE1(sw, k_return, k);
	}
	for (long i = 0; i < 12; i++) {
		STAP_PROBE2(sw, q_start, i, i % 3);
		if (i % 4 == 0) {
			STAP_PROBE2(sw, q_start, 100, 7);
			STAP_PROBE2(sw, q_done, 100, 0);
		}
		STAP_PROBE2(sw, q_done, i, i % 2);
	}
	for (long id = 1; id <= 6; id += 3) {
		for (long k = id; k < id + 3; k++)
			STAP_PROBE2(sw, r_start, k, k % 2);
		for (long k = id + 2; k >= id; k--)
			STAP_PROBE2(sw, r_done, k, k % 3 == 0);
	}
	printf("done\n");
	fflush(stdout);
	return 0;
}
