/* A span emitter with a JIT frame: a loop of hostile:start/hostile:done
 * USDT pairs (5 ms apart, past a 1 ms budget), each called through a
 * trampoline in anonymous executable memory, as a JIT's code would be, so
 * that the stack taken at hostile:done has a frame only a perf map names.
 * Built -O0 -g -fno-omit-frame-pointer by the benchmark. */
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/sdt.h>
#include <unistd.h>

__attribute__((noinline)) static void do_span(void)
{
	DTRACE_PROBE(hostile, start);
	usleep(5000);
	DTRACE_PROBE(hostile, done);
}

int main(void)
{
	/* push %rbp; mov %rsp,%rbp; call *%rdi; pop %rbp; ret */
	static const unsigned char code[] = {0x55, 0x48, 0x89, 0xe5, 0xff, 0xd7, 0x5d, 0xc3};
	void *page = mmap(NULL, 4096, PROT_READ | PROT_WRITE | PROT_EXEC, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (page == MAP_FAILED)
		return 1;
	memcpy(page, code, sizeof code);
	void (*tramp)(void (*)(void)) = (void (*)(void (*)(void)))page;
	printf("ready\n");
	fflush(stdout);
	for (;;) {
		tramp(do_span);
		usleep(20000);
	}
}
