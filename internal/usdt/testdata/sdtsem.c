/* A semaphore-guarded probe (sw:sem): its arguments are only computed while
 * a tracer has the semaphore raised. See sdtprog.c. */
#define _SDT_HAS_SEMAPHORES 1
#include <stdint.h>
#include <sys/sdt.h>

unsigned short sw_sem_semaphore __attribute__((unused)) __attribute__((section(".probes")));

unsigned short sem_semaphore_value(void)
{
	return *(volatile unsigned short *)&sw_sem_semaphore;
}

__attribute__((noinline)) void sem_fire(long seed)
{
	if (*(volatile unsigned short *)&sw_sem_semaphore) {
		int32_t v = -777 + (int32_t)seed;
		uint64_t w = 0x1122334455667788ull + (uint64_t)seed;
		STAP_PROBE2(sw, sem, v, w);
	}
}
