// uevprog registers its own user_events with the kernel's ABI (ioctl
// DIAG_IOCSREG on user_events_data, then writev), not spanwatch's header,
// and writes spans a spanwatch collector reads by the fields' offsets.
// Built static by test/vm/run-all.sh into testdata/ (the VM has no
// compiler): gcc -static -O2 -g -fno-omit-frame-pointer.
//
//   uevprog single N   uev_req: u64 dur_ns; u32 failed; u32 status; __rel_loc char[] route
//                      N spans, durations i*1000 ns, routes /a and /b, every
//                      10th failed; then 3 slow spans (50 ms) on /slow written
//                      from slow_leaf, called through slow_mid from main
//   uevprog multi N    uev_multi registered twice with USER_EVENT_REG_MULTI_FORMAT
//                      (kernel 6.9+), in two formats: "u64 dur_ns; u32 failed"
//                      and "u32 pad; u64 dur_ns; u32 failed"; N spans of 1000 ns
//                      on each, every 4th failed
//   uevprog fmt a|b    registers uev_fmt as "u32 a" (and waits to be enabled)
//                      or as "u64 b" (and does not); prints "eaddrinuse"
//                      instead of "registered" when the kernel refuses it so
//   uevprog pair N     uev_begin: u64 req_id; __rel_loc char[] route
//                      uev_end:   u64 req_id; u32 failed
//                      N requests of about 1 ms, begun two at a time and
//                      ended in reverse order (paired by req_id), every 5th
//                      failed
//
// It prints "registered", waits (up to 10 s) for a tracer to enable every
// event, writes, prints "done N" and exits.
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

struct user_reg {
	uint32_t size;
	uint8_t enable_bit;
	uint8_t enable_size;
	uint16_t flags;
	uint64_t enable_addr;
	uint64_t name_args;
	uint32_t write_index;
} __attribute__((__packed__));

#define DIAG_IOCSREG _IOWR('*', 0, struct user_reg *)

static int data_fd = -1;
static volatile uint32_t enabled[4]; /* one word per event: the kernel sets bit 0 */

#define USER_EVENT_REG_MULTI_FORMAT (1U << 1)

static uint32_t reg_flags(const char *args, int slot, uint16_t flags)
{
	struct user_reg r = {
		.size = sizeof(r),
		.enable_bit = 0,
		.enable_size = 4,
		.flags = flags,
		.enable_addr = (uint64_t)(uintptr_t)&enabled[slot],
		.name_args = (uint64_t)(uintptr_t)args,
	};
	if (ioctl(data_fd, DIAG_IOCSREG, &r) < 0) {
		fprintf(stderr, "register %s: %s\n", args, strerror(errno));
		exit(2);
	}
	return r.write_index;
}

static uint32_t reg(const char *args, int slot)
{
	return reg_flags(args, slot, 0);
}

static void wait_enabled(int n)
{
	for (int t = 0; t < 10000; t++) {
		int all = 1;
		for (int i = 0; i < n; i++)
			all &= enabled[i] & 1;
		if (all)
			return;
		usleep(1000);
	}
	fprintf(stderr, "not enabled after 10 s\n");
	exit(3);
}

static void sleep_ns(long ns)
{
	struct timespec ts = {ns / 1000000000L, ns % 1000000000L};
	nanosleep(&ts, NULL);
}

static uint32_t req_idx;

/* uev_req: the fixed part, then the route (the __rel_loc data). */
static void write_req(uint64_t dur, uint32_t failed, uint32_t status, const char *route)
{
	uint32_t len = strlen(route) + 1;
	uint32_t loc = len << 16 | 0; /* the data right after the field */
	struct iovec io[] = {
		{&req_idx, 4}, {&dur, 8}, {&failed, 4}, {&status, 4}, {&loc, 4}, {(void *)route, len},
	};
	if (writev(data_fd, io, 6) < 0 && errno != EBADF) {
		fprintf(stderr, "writev: %s\n", strerror(errno));
		exit(4);
	}
}

__attribute__((noinline)) static void slow_leaf(void)
{
	write_req(50 * 1000 * 1000, 0, 200, "/slow");
	__asm__ volatile("" ::: "memory");
}

__attribute__((noinline)) static void slow_mid(void)
{
	slow_leaf();
	__asm__ volatile("" ::: "memory");
}

static void single(int n)
{
	req_idx = reg("uev_req u64 dur_ns; u32 failed; u32 status; __rel_loc char[] route", 0);
	printf("registered\n");
	fflush(stdout);
	wait_enabled(1);
	for (int i = 1; i <= n; i++)
		write_req((uint64_t)i * 1000, i % 10 == 0, i % 10 == 0 ? 503 : 200, i % 2 ? "/a" : "/b");
	for (int i = 0; i < 3; i++)
		slow_mid();
	printf("done %d\n", n + 3);
	/* Stay a moment, so the collector can read this process's maps to
	 * name the frames of the overrun stacks (stacks of processes that
	 * already exited are another matter). */
	fflush(stdout);
	sleep_ns(1000L * 1000 * 1000);
}

static void multi(int n)
{
	uint32_t a = reg_flags("uev_multi u64 dur_ns; u32 failed", 0, USER_EVENT_REG_MULTI_FORMAT);
	uint32_t b = reg_flags("uev_multi u32 pad; u64 dur_ns; u32 failed", 1, USER_EVENT_REG_MULTI_FORMAT);
	printf("registered\n");
	fflush(stdout);
	wait_enabled(2);
	for (int i = 1; i <= n; i++) {
		uint64_t dur = 1000;
		uint32_t failed = i % 4 == 0, pad = 0xffffffff;
		struct iovec ia[] = {{&a, 4}, {&dur, 8}, {&failed, 4}};
		struct iovec ib[] = {{&b, 4}, {&pad, 4}, {&dur, 8}, {&failed, 4}};
		writev(data_fd, ia, 3);
		writev(data_fd, ib, 4);
	}
	printf("done %d\n", 2 * n);
}

static void fmt(const char *which)
{
	int a = which[0] == 'a';
	struct user_reg r = {
		.size = sizeof(r),
		.enable_size = 4,
		.enable_addr = (uint64_t)(uintptr_t)&enabled[0],
		.name_args = (uint64_t)(uintptr_t)(a ? "uev_fmt u32 a" : "uev_fmt u64 b"),
	};
	if (ioctl(data_fd, DIAG_IOCSREG, &r) < 0) {
		if (errno == EADDRINUSE) {
			printf("eaddrinuse\ndone 0\n");
			return;
		}
		fprintf(stderr, "register uev_fmt: %s\n", strerror(errno));
		exit(2);
	}
	printf("registered\n");
	fflush(stdout);
	if (a)
		wait_enabled(1);
	printf("done 0\n");
}

static void pair(int n)
{
	uint32_t b = reg("uev_begin u64 req_id; __rel_loc char[] route", 0);
	uint32_t e = reg("uev_end u64 req_id; u32 failed", 1);
	printf("registered\n");
	fflush(stdout);
	wait_enabled(2);
	for (int i = 1; i + 1 <= n; i += 2) {
		for (int k = 0; k < 2; k++) {
			uint64_t id = i + k;
			const char *route = "/job";
			uint32_t len = strlen(route) + 1, loc = len << 16;
			struct iovec io[] = {{&b, 4}, {&id, 8}, {&loc, 4}, {(void *)route, len}};
			writev(data_fd, io, 4);
		}
		sleep_ns(1000 * 1000);
		for (int k = 1; k >= 0; k--) {
			uint64_t id = i + k;
			uint32_t failed = id % 5 == 0;
			struct iovec io[] = {{&e, 4}, {&id, 8}, {&failed, 4}};
			writev(data_fd, io, 3);
		}
	}
	printf("done %d\n", n);
}

int main(int argc, char **argv)
{
	if (argc != 3) {
		fprintf(stderr, "usage: uevprog single|pair N\n");
		return 1;
	}
	data_fd = open("/sys/kernel/tracing/user_events_data", O_RDWR);
	if (data_fd < 0) {
		fprintf(stderr, "open user_events_data: %s\n", strerror(errno));
		return 2;
	}
	int n = atoi(argv[2]);
	if (!strcmp(argv[1], "fmt")) {
		fmt(argv[2]);
		fflush(stdout);
		return 0;
	}
	if (!strcmp(argv[1], "single"))
		single(n);
	else if (!strcmp(argv[1], "multi"))
		multi(n);
	else
		pair(n);
	fflush(stdout);
	return 0;
}
