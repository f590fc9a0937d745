// SPDX-License-Identifier: (Apache-2.0 OR BSD-2-Clause)
/*
 * libspanwatch: include/spanwatch.h as a library with a C ABI
 * (libspanwatch.h), for the SDKs of other languages. Its span state, marker
 * and probe word are the library's own (hidden symbols), so a process that
 * loads it and also includes spanwatch.h in its executable has two, both
 * found by the agent.
 */
#include "../../../include/spanwatch.h"
#include "../libspanwatch.h"

#define API __attribute__((visibility("default")))

static struct spanwatch lib_sw = {SPANWATCH_MODE_NONE, 0, -1, 0};

/* Loading the library chooses the mode: the first span needs no call of
 * its own (user_events must be registered before anyone can listen).
 * include/test/spanwatch_test.c compiles this file into itself without it,
 * to choose the user_events_data path. */
#ifndef SPANWATCH_LIB_NO_INIT
__attribute__((constructor)) static void lib_init(void)
{
	spanwatch_open(&lib_sw);
}
#endif

API int spanwatch_lib_abi(void) { return SPANWATCH_LIB_ABI; }

API int spanwatch_lib_mode(void) { return (int)lib_sw.mode; }

API int spanwatch_lib_error(void) { return lib_sw.error; }

API const volatile uint64_t *spanwatch_lib_word(void) { return &spanwatch_probe_.word; }

API int spanwatch_lib_listening(void) { return spanwatch_listening(); }

API uint64_t spanwatch_lib_monotonic_ns(void) { return spanwatch_clock_ns_(CLOCK_MONOTONIC); }

API uint64_t spanwatch_lib_realtime_ns(void) { return spanwatch_clock_ns_(CLOCK_REALTIME); }

API int spanwatch_lib_record(const char *name, size_t name_len, uint64_t duration_ns, uint64_t start_ns,
			     int error, const uint8_t *trace_id, const uint8_t *span_id)
{
	return spanwatch_emit_n(&lib_sw, name, name_len, duration_ns, start_ns, error, trace_id, span_id);
}

API int spanwatch_lib_start(const char *name, size_t name_len, uint64_t start_ns, uint32_t flags,
			    const uint8_t *trace_id, const uint8_t *span_id)
{
	return spanwatch_emit_start_n(&lib_sw, name, name_len, start_ns, flags, trace_id, span_id);
}

API int spanwatch_lib_emit(const void *event)
{
	return spanwatch_emit_event(&lib_sw, (const struct spanwatch_event *)event);
}
