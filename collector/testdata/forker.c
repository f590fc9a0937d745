/* A parent that forks short-lived children, as a PostgreSQL postmaster
 * forks backends: each child runs one span between the USDT probes
 * sw:f_start and sw:f_done (main -> serve -> work -> slow, 20 ms) and exits
 * at once with _exit, before anything can read its maps. Built by the test
 * with -O2 -g -fno-omit-frame-pointer and sys/sdt.h. Usage: forker N. */
#include <stdlib.h>
#include <sys/sdt.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

__attribute__((noinline)) void slow(void)
{
	struct timespec ts = {0, 20 * 1000 * 1000};

	nanosleep(&ts, 0);
	STAP_PROBE1(sw, f_done, 0);
	asm volatile("" ::: "memory"); /* keep the probe inside slow */
}

__attribute__((noinline)) void work(void)
{
	slow();
	asm volatile("" ::: "memory");
}

__attribute__((noinline)) void serve(void)
{
	STAP_PROBE(sw, f_start);
	work();
	_exit(0);
}

int main(int argc, char **argv)
{
	int n = argc > 1 ? atoi(argv[1]) : 1;

	for (int i = 0; i < n; i++) {
		pid_t pid = fork();
		if (pid == 0)
			serve();
		waitpid(pid, 0, 0);
	}
	return 0;
}
