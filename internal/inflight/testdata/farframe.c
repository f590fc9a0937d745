/* A thread whose frame pointer points into a file mapping no page of which
 * was ever read (argv[1], a file of a FUSE mount whose daemon does not
 * answer reads): it blocks in read(0) with that frame pointer, as a
 * hostile process can, so that the blocked-thread sampler, which walks
 * frame pointers from a blocked thread's saved registers, is handed memory
 * whose page fault would wait for that daemon. It prints "ready" once
 * mapped and returns when stdin closes. */
#include <fcntl.h>
#include <stdio.h>
#include <sys/mman.h>
#include <unistd.h>

static long read_with_fp(void *fp, char *buf)
{
#if defined(__x86_64__)
	long ret;
	/* Below the red zone, then rbp saved, set, restored around the
	 * system call. */
	asm volatile("sub $128, %%rsp\n\t"
		     "push %%rbp\n\t"
		     "mov %[fp], %%rbp\n\t"
		     "syscall\n\t"
		     "pop %%rbp\n\t"
		     "add $128, %%rsp"
		     : "=a"(ret)
		     : "a"(0L /* read */), "D"(0L), "S"(buf), "d"(1L), [fp] "r"(fp)
		     : "rcx", "r11", "memory");
	return ret;
#elif defined(__aarch64__)
	register long x0 asm("x0") = 0;
	register long x1 asm("x1") = (long)buf;
	register long x2 asm("x2") = 1;
	register long x8 asm("x8") = 63; /* read */
	asm volatile("stp x29, x30, [sp, #-16]!\n\t"
		     "mov x29, %[fp]\n\t"
		     "svc #0\n\t"
		     "ldp x29, x30, [sp], #16"
		     : "+r"(x0)
		     : "r"(x1), "r"(x2), "r"(x8), [fp] "r"(fp)
		     : "memory");
	return x0;
#else
#error "x86-64 or arm64"
#endif
}

int main(int argc, char **argv)
{
	char buf[1];
	int fd;
	char *m;

	if (argc < 2)
		return 2;
	fd = open(argv[1], O_RDONLY);
	if (fd < 0) {
		perror("open");
		return 1;
	}
	m = mmap(NULL, 1 << 20, PROT_READ, MAP_PRIVATE, fd, 0);
	if (m == MAP_FAILED) {
		perror("mmap");
		return 1;
	}
	printf("ready\n");
	fflush(stdout);
	while (read_with_fp(m + (8 << 12), buf) > 0)
		;
	return 0;
}
