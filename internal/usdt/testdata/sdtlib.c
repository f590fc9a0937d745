/* A shared library with a probe (swlib:fire). See sdtprog.c. */
#include <stdint.h>
#include <sys/sdt.h>

static const char lib_name[] = "from-lib";

__attribute__((noinline)) void lib_fire(long seed)
{
	int64_t v = -123456789 + seed;
	int16_t s = (int16_t)(-5 + seed);
	STAP_PROBE3(swlib, fire, v, s, lib_name);
}
