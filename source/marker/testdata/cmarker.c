// SPDX-License-Identifier: (Apache-2.0 OR BSD-2-Clause)
/*
 * libspanwatch's marker (include/spanwatch.h) for the marker source's and the collector's tests.
 *
 *   cmarker sysv N NAME   N spans through the header's marker (the event's
 *                         address in the first argument register, %rdi or
 *                         x0: uprobe_marker_sysv); prints the ns per span
 *   cmarker abi0 N NAME   N spans through a marker that presents the Go
 *                         SDK's layout instead (the address pushed on the
 *                         stack, at sp+8 at the nop: uprobe_marker), for
 *                         BenchmarkCMarkerConvention
 *   cmarker wait NAME     one span each time a line arrives on stdin, until
 *                         EOF (a process for the /proc scan to find)
 *
 * Spans last 1 ms, every 10th is an error, and the trace id is bytes 1..16.
 */
#include <stdio.h>
#include <stdlib.h>

#include "../../../include/spanwatch.h"

/* The other convention: a frame, the event on the stack at sp+8, then the
 * nop (on AArch64, as Go's ABI0 lays it out: 0(sp) is the caller's LR
 * slot). */
#if defined(__x86_64__)
__asm__(".text\n"
	".globl abi0_call\n"
	".type abi0_call,@function\n"
	"abi0_call:\n"
	"\tpush %rbp\n"
	"\tmov %rsp, %rbp\n"
	"\tpush %rdi\n"
	"\tcall abi0_marker\n"
	"\tpop %rdi\n"
	"\tpop %rbp\n"
	"\tret\n"
	".size abi0_call,.-abi0_call\n"
	".globl abi0_marker\n"
	".type abi0_marker,@function\n"
	"abi0_marker:\n"
	"\tnop\n"
	"\tret\n"
	".size abi0_marker,.-abi0_marker\n");
#elif defined(__aarch64__)
__asm__(".text\n"
	".p2align 2\n"
	".globl abi0_call\n"
	".type abi0_call,@function\n"
	"abi0_call:\n"
	"\tstp x29, x30, [sp, #-16]!\n"
	"\tmov x29, sp\n"
	"\tsub sp, sp, #16\n"
	"\tstr x0, [sp, #8]\n"
	"\tbl abi0_marker\n"
	"\tadd sp, sp, #16\n"
	"\tldp x29, x30, [sp], #16\n"
	"\tret\n"
	".size abi0_call,.-abi0_call\n"
	".globl abi0_marker\n"
	".type abi0_marker,@function\n"
	"abi0_marker:\n"
	"\tnop\n"
	"\tret\n"
	".size abi0_marker,.-abi0_marker\n");
#endif
#ifdef __cplusplus
extern "C"
#endif
void abi0_call(const struct spanwatch_event *ev);

static struct spanwatch sw;
static uint8_t trace[16] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16};

static void fill(struct spanwatch_event *ev, const char *name, long k)
{
	memset(ev, 0, sizeof(*ev));
	ev->duration_ns = 1000000;
	ev->status = k % 10 == 9;
	memcpy(ev->trace_id, trace, sizeof(trace));
	spanwatch_fill_name_(ev, name, strlen(name));
}

int main(int argc, char **argv)
{
	struct spanwatch_event ev;

	if (spanwatch_open(&sw) != 0 || sw.mode != SPANWATCH_MODE_MARKER) {
		fprintf(stderr, "mode %u error %d: want the marker\n", sw.mode, sw.error);
		return 2;
	}
	if (argc == 4 && (!strcmp(argv[1], "sysv") || !strcmp(argv[1], "abi0"))) {
		int abi0 = !strcmp(argv[1], "abi0");
		long n = atol(argv[2]);
		uint64_t t0 = spanwatch_clock_ns_(CLOCK_MONOTONIC);

		for (long k = 0; k < n; k++) {
			if (!spanwatch_listening())
				continue;
			fill(&ev, argv[3], k);
			if (abi0)
				abi0_call(&ev);
			else
				spanwatch_emit_event(&sw, &ev);
		}
		printf("%.1f ns/span listening=%d\n", (double)(spanwatch_clock_ns_(CLOCK_MONOTONIC) - t0) / (double)n,
		       spanwatch_listening());
		return 0;
	}
	if (argc == 3 && !strcmp(argv[1], "wait")) {
		char line[64];
		long k = 0;

		printf("ready\n");
		fflush(stdout);
		while (fgets(line, sizeof(line), stdin)) {
			fill(&ev, argv[2], k++);
			spanwatch_emit_event(&sw, &ev);
			printf("listening=%d\n", spanwatch_listening());
			fflush(stdout);
		}
		return 0;
	}
	fprintf(stderr, "usage: %s sysv|abi0 N NAME | wait NAME\n", argv[0]);
	return 2;
}
