/* SPDX-License-Identifier: (Apache-2.0 OR BSD-2-Clause) */
/*
 * libspanwatch.h - the C ABI of libspanwatch (libspanwatch.so.1,
 * libspanwatch.a), for languages that call C through a foreign function
 * interface (Python ctypes, Node.js koffi or N-API, Java JNI or FFM, .NET
 * P/Invoke, Rust FFI). C and C++ programs may use include/spanwatch.h
 * directly instead: the library is built from it.
 *
 * The library chooses how spans leave the process when it is loaded (user_events where the kernel
 * has them and the process may write them, else the marker the agent
 * uprobes); spanwatch_lib_mode says which. Every function may be called
 * from any thread. Names are byte strings of the given length (UTF-8, not
 * NUL-terminated); the agent cuts names longer than 127 bytes on a UTF-8
 * character boundary. Ids are NULL or 16 (trace) and 8 (span) bytes.
 *
 * While nobody listens, the word spanwatch_lib_word points at is 0: an SDK
 * reads it (one load and a branch) before it calls anything else.
 */
#ifndef LIBSPANWATCH_H
#define LIBSPANWATCH_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define SPANWATCH_LIB_ABI 1 /* spanwatch_lib_abi(): bumped when this ABI changes incompatibly */

/* The ABI version, SPANWATCH_LIB_ABI. */
int spanwatch_lib_abi(void);

/* How spans leave the process: 1 marker, 2 user_events, 3 off (the
 * SPANWATCH_MODE_* values of spanwatch.h). */
int spanwatch_lib_mode(void);

/* The errno of the failed user_events registration (0 if none). */
int spanwatch_lib_error(void);

/* The 8-byte probe word: non-zero while an agent listens. It is in the
 * library's data and never moves; a runtime may map it (a typed array, a
 * direct buffer) and test it without a call. */
const volatile uint64_t *spanwatch_lib_word(void);

/* 1 while an agent listens, else 0. */
int spanwatch_lib_listening(void);

/* The clocks spans are measured with, in nanoseconds. */
uint64_t spanwatch_lib_monotonic_ns(void);
uint64_t spanwatch_lib_realtime_ns(void);

/* Records a finished span: its duration, its start (CLOCK_REALTIME ns, 0 if
 * unknown), error non-zero for a failed span. 0, or a negative errno. */
int spanwatch_lib_record(const char *name, size_t name_len, uint64_t duration_ns, uint64_t start_ns,
			 int error, const uint8_t *trace_id, const uint8_t *span_id);

/* Tells the agent a span began on this thread, started at start_ns
 * (CLOCK_REALTIME): the agent samples the thread while it runs past its
 * budget. The span's record must carry the same start_ns, from the same
 * thread. flags: 2 when the final name may extend this one. */
int spanwatch_lib_start(const char *name, size_t name_len, uint64_t start_ns, uint32_t flags,
			const uint8_t *trace_id, const uint8_t *span_id);

/* Hands a filled 184-byte struct span_event (bpf/span_event.h) to the
 * agent as it is. */
int spanwatch_lib_emit(const void *event);

#ifdef __cplusplus
}
#endif

#endif
