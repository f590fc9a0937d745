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

/*
 * hist_index returns the bucket of 1 <= v for the scale given by table,
 * cell, k, off and shift (HIST_DURATION_* or HIST_VALUE_*): the smallest i
 * with v <= S * 2^(i/64). Values above HIST_MAX_EXACT share its bucket.
 * Below it every shift stays under 2^63 (see snapshot/histogram.go).
 * After the octave, the bucket in it costs one table look-up and one
 * comparison: the octave is cut in cells narrower than any bucket, and
 * cell[j] is the bucket of cell j's first value, so the value's bucket is
 * cell[j] or the next one.
 */
static __always_inline __s32 hist_index(__u64 v, const __u64 *table, const __u8 *cell, int k, int off, int shift)
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
	l = v << ((k - p) & 63); /* in (table[0], table[64]] */
	__u32 r = cell[((l - table[0]) >> shift) & 255];
	r += HIST_GT(l, table[r & 127]); /* table[64] is the last bound, then padding */
	return p * 64 + r;
}

static __always_inline __s32 hist_duration_index(__u64 ns)
{
	return hist_index(ns, HIST_DURATION_TABLE, HIST_DURATION_CELL, HIST_DURATION_K, HIST_DURATION_OFF,
			  HIST_DURATION_CELL_SHIFT);
}

static __always_inline __s32 hist_value_index(__u64 v)
{
	return hist_index(v, HIST_VALUE_TABLE, HIST_VALUE_CELL, HIST_VALUE_K, HIST_VALUE_OFF, HIST_VALUE_CELL_SHIFT);
}

#endif
