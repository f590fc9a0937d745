/* A fake JIT that maps its code from a memfd, as JITs with W^X double
 * mapping do: the executable mapping is file-backed ("/memfd:jit
 * (deleted)") but no ELF file. It prints the code's address, then waits
 * for stdin to close. */
#define _GNU_SOURCE
#include <stdio.h>
#include <sys/mman.h>
#include <unistd.h>

int main(void)
{
	int fd = memfd_create("jit", 0);
	static const unsigned char code[4096] = {0xc3}; /* ret */
	char buf[1];

	if (fd < 0 || write(fd, code, sizeof(code)) != sizeof(code))
		return 1;
	void *p = mmap(NULL, sizeof(code), PROT_READ | PROT_EXEC, MAP_SHARED, fd, 0);
	if (p == MAP_FAILED)
		return 1;
	printf("%lx\n", (unsigned long)p);
	fflush(stdout);
	while (read(0, buf, 1) > 0)
		;
	return 0;
}
