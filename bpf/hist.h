/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * Prometheus native-histogram buckets of schema 6, in integers: bucket i
 * holds the values v with S * 2^((i-1)/64) < v <= S * 2^(i/64), S = 1e9 for
 * durations in nanoseconds (so buckets are in seconds, as a _seconds
 * histogram's are) and S = 1 for metric values. snapshot/histogram.go does
 * the same steps in Go, and its tests check both against the definition
 * computed with 300-bit floats; the tables come from there (hist_table.h).
 */
#ifndef SPANWATCH_HIST_H
#define SPANWATCH_HIST_H

#include "hist_table.h"

/* Values above this (146 years of nanoseconds) share its bucket. */
#define HIST_MAX_EXACT (1ULL << 62)

/*
 * Branch-free: each branch here would double the paths the verifier walks
 * (6 + 6 of them made the core unloadable in reasonable time). nz(x, w) is
 * 1 when x (below 2^w) is not 0: x + 2^w - 1 reaches 2^w exactly then.
 */
#define HIST_NZ(x, w) (((x) + ((1ULL << (w)) - 1)) >> (w))

static __always_inline __u32 hist_log2(__u64 v)
{
	__u64 r = 0, s;

	s = HIST_NZ(v >> 32, 32) << 5; v >>= s; r += s;
	s = HIST_NZ(v >> 16, 16) << 4; v >>= s; r += s;
	s = HIST_NZ(v >> 8, 8) << 3; v >>= s; r += s;
	s = HIST_NZ(v >> 4, 4) << 2; v >>= s; r += s;
	s = HIST_NZ(v >> 2, 2) << 1; v >>= s; r += s;
	r += v >> 1;
	return r;
}

/* hist_gt is 1 when a > b, for a and b below 2^63. */
#define HIST_GT(a, b) (((b) - (a)) >> 63)

/* hist_search returns the smallest r in 1..64 with l <= table[r], given
 * l <= table[64] < 2^63: six branch-free steps of a binary search. */
static __always_inline __u32 hist_search(const __u64 *table, __u64 l)
{
	__u64 lo = 1, hi = 64;

#pragma unroll
	for (int i = 0; i < 6; i++) {
		__u64 mid = (lo + hi) / 2; /* at most 63 */
		__u64 gt = HIST_GT(l, table[mid & 63]);
		lo += gt * (mid + 1 - lo);
		hi -= (1 - gt) * (hi - mid);
	}
	return lo;
}

/*
 * hist_index returns the bucket of 1 <= v for the scale given by table, k
 * and off (HIST_DURATION_* or HIST_VALUE_*): the smallest i with
 * v <= S * 2^(i/64). Values above HIST_MAX_EXACT share its bucket. Below
 * it every shift stays under 2^63 (see snapshot/histogram.go).
 */
static __always_inline __s32 hist_index(__u64 v, const __u64 *table, int k, int off)
{
	if (v > HIST_MAX_EXACT)
		v = HIST_MAX_EXACT;
	__s64 b = hist_log2(v);
	__s64 p = b - off;
	/* S * 2^p < 2^b <= v. Is v above S * 2^(p+1) too? v << (k - p)
	 * then >> 1 is v * 2^(k-p-1) without a negative shift (k - p is 0
	 * only for HIST_MAX_EXACT, whose low bit is 0). */
	__u64 l = (v << ((k - p) & 63)) >> 1;
	p += HIST_GT(l, table[0]);
	return p * 64 + hist_search(table, v << ((k - p) & 63));
}

static __always_inline __s32 hist_duration_index(__u64 ns)
{
	return hist_index(ns, HIST_DURATION_TABLE, HIST_DURATION_K, HIST_DURATION_OFF);
}

static __always_inline __s32 hist_value_index(__u64 v)
{
	return hist_index(v, HIST_VALUE_TABLE, HIST_VALUE_K, HIST_VALUE_OFF);
}

#endif
