/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * An EventHeader decoder for BPF: the self-describing user_events format of
 * Microsoft's LinuxTracepoints (eventheader.h), which the OpenTelemetry
 * user_events exporters write. An event is an 8-byte header, extension
 * blocks (the event's metadata, activity ids), then the field values; the
 * metadata names the event and each field, with its encoding (its size)
 * and format, structs nesting the fields that follow.
 *
 * The payload is copied into a per-CPU buffer, then walked with bounded
 * loops: the extension blocks, the event name, then the field definitions
 * one per bpf_loop() iteration (kernel 5.17+), advancing through the data
 * in step. Field names are not compared but hashed (eh_name_hash,
 * eh_path_hash: FNV-1a over 8-byte words, then a mix), and the walk stops
 * once every field a mapping wants is found. Whatever the decoder cannot
 * read for certain is refused with a reason (enum eh_reason), never
 * guessed.
 *
 * internal/eventheader is the same decoder in Go, with the same limits and
 * the same reasons; its tests and this one's hold them together. Both
 * must change together.
 *
 * The buffer lives in a per-CPU map: the user_events write path calls
 * perf_tp_event() with preemption disabled (rcu_read_lock_sched in
 * user_events_write_core), and a second run of the program on a CPU cannot
 * start before the first ends.
 */
#ifndef SPANWATCH_EVENTHEADER_H
#define SPANWATCH_EVENTHEADER_H

/* The decoder's limits: internal/eventheader walks with the same ones
 * (BufSize, MaxFields...), so both refuse the same events. */
enum eh_limits {
	EH_BUF_SIZE = 8192, /* bytes of payload copied and walked */
	EH_BUF_SLACK = 128, /* so reads of up to 128 bytes (a span name) at a masked offset stay inside */
	EH_MAX_FIELDS = 64,
	EH_MAX_DEPTH = 4,
	EH_MAX_NAME_WORDS = 32, /* 255 bytes and the NUL */
	EH_MAX_NAME_LEN = 255,
	EH_MAX_EXT = 4,
	EH_MAX_ELEMS = 64,
	EH_MAX_WANT = 12,
	EH_TIME_MAX = 64,
};

#define EH_BUF_MASK (EH_BUF_SIZE - 1)

/* The EventHeader format (eventheader.h of LinuxTracepoints):
 * internal/eventheader's Flag*, Ext*, Enc* and Format* constants. */
enum eh_format {
	EH_HEADER_SIZE = 8,
	EH_FLAG_LITTLE_ENDIAN = 0x02,
	EH_FLAG_EXTENSION = 0x04,
	EH_EXT_KIND_MASK = 0x7fff,
	EH_EXT_CHAIN = 0x8000,
	EH_EXT_METADATA = 1,
	EH_EXT_ACTIVITY_ID = 2,
	EH_ENC_MASK = 0x1f,
	EH_ENC_CARRAY = 0x20,
	EH_ENC_VARRAY = 0x40,
	EH_ENC_CHAIN = 0x80,
	EH_FMT_MASK = 0x7f,
	EH_FMT_CHAIN = 0x80,
	EH_FMT_SIGNED_INT = 2,
};

enum eh_encoding {
	EH_ENC_INVALID = 0,
	EH_ENC_STRUCT = 1,
	EH_ENC_VALUE8 = 2,
	EH_ENC_VALUE16 = 3,
	EH_ENC_VALUE32 = 4,
	EH_ENC_VALUE64 = 5,
	EH_ENC_VALUE128 = 6,
	EH_ENC_ZSTRING_CHAR8 = 7,
	EH_ENC_ZSTRING_CHAR16 = 8,
	EH_ENC_ZSTRING_CHAR32 = 9,
	EH_ENC_STRING16_CHAR8 = 10,
	EH_ENC_STRING16_CHAR16 = 11,
	EH_ENC_STRING16_CHAR32 = 12,
	EH_ENC_BINARY16_CHAR8 = 13,
	EH_ENC_MAX = 14,
};

/* Why an event was not made a span: internal/eventheader Reason. */
enum eh_reason {
	EH_OK = 0,
	EH_SHORT,	      /* payload shorter than the 8-byte header */
	EH_BIG_ENDIAN,	      /* big-endian event: not decoded */
	EH_NO_METADATA,	      /* no metadata extension: fields have no names */
	EH_BAD_EXTENSION,     /* an extension block past the payload, or too many */
	EH_TRUNCATED_META,    /* metadata ends inside a name or a field definition */
	EH_TRUNCATED_DATA,    /* data ends inside a field's value */
	EH_BAD_STRUCT,	      /* no members, nested too deep, or members past the metadata */
	EH_UNSUPPORTED,	      /* an encoding that cannot be sized: invalid, array of structs */
	EH_TOO_LARGE,	      /* past a walk limit (buffer, fields, name length, elements) */
	EH_MISSING_FIELD,     /* a wanted field is not in the event */
	EH_FIELD_TYPE,	      /* a wanted field cannot give the value asked of it */
	EH_BAD_TIME,	      /* a time that is not RFC 3339 */
	EH_NEGATIVE_DURATION, /* the span ends before it starts */
	EH_BAD_ID,	      /* a trace or span id that is not hex of the right length */
	EH_OTHER_EVENT,	      /* an event no mapping takes (not an error) */
	EH_UNPAIRED,	      /* the end of a pair without its start */
	EH_NUM_REASONS,
};

struct eh_buf {
	__u8 b[EH_BUF_SIZE + EH_BUF_SLACK];
};

/* Where a wanted field's value is in the buffer. */
struct eh_loc {
	__u32 off;  /* the value, including a counted string's length */
	__u16 size; /* bytes, including that length */
	__u8 enc;   /* encoding, with its flags; 0: not found */
	__u8 fmt;
};

#define EH_DEPTH_SLOTS 8 /* >= EH_MAX_DEPTH + 1, a power of two for masking */
#define EH_WANT_SLOTS 16 /* >= EH_MAX_WANT, a power of two for masking */

/* The walk's state. */
struct eh_walk {
	__u32 n;       /* bytes in buf */
	__u32 clipped; /* the payload was longer than the buffer */
	__u32 mpos, mend, dpos;
	__u32 depth;
	__u32 nwant, found;
	__u32 reason;
	__u32 remaining[EH_DEPTH_SLOTS];
	__u64 hash[EH_DEPTH_SLOTS];
	__u64 want[EH_WANT_SLOTS]; /* the path hashes to find */
	struct eh_loc loc[EH_WANT_SLOTS];
};

/*
 * The per-CPU scratch the decoder works in: the payload, the walk, and
 * what a source builds from them. Too big for the BPF stack.
 */
struct eh_scratch {
	struct eh_buf buf;
	struct eh_walk walk;
};

/* What bpf_loop() hands each iteration: the callback context must be on
 * the stack, the state it points to is in the map value. */
struct eh_loop_ctx {
	struct eh_scratch *s;
};

#define EH_FNV_OFFSET 0xcbf29ce484222325ULL
#define EH_FNV_PRIME 0x100000001b3ULL

static __always_inline __u64 eh_fmix(__u64 h)
{
	h ^= h >> 33;
	h *= 0xff51afd7ed558ccdULL;
	h ^= h >> 33;
	h *= 0xc4ceb9fe1a85ec53ULL;
	h ^= h >> 33;
	return h;
}

static __always_inline __u64 eh_path_hash(__u64 parent, __u64 child)
{
	__u64 h = eh_fmix(parent * 0x9e3779b97f4a7c15ULL ^ child);
	return h ? h : 1;
}

static __always_inline __u32 eh_reason_short(const struct eh_walk *w, __u32 r)
{
	return w->clipped ? EH_TOO_LARGE : r;
}

static __always_inline __u16 eh_u16(const struct eh_buf *buf, __u32 at)
{
	return *(const __u16 *)&buf->b[at & EH_BUF_MASK];
}

/*
 * eh_name scans the NUL-terminated name at pos, which must end before end,
 * 8 bytes at a time, hashing it as internal/eventheader NameHash does. It
 * sets *next past the NUL and returns EH_OK, or the reason it cannot.
 */
static __always_inline __u32 eh_name(const struct eh_buf *buf, __u32 pos, __u32 end, __u64 *hash, __u32 *next)
{
	__u64 h = EH_FNV_OFFSET;

	for (int i = 0; i < EH_MAX_NAME_WORDS; i++) {
		__u32 at = pos + i * 8;
		if (at >= end)
			return EH_TRUNCATED_META;
		__u64 w = *(const __u64 *)&buf->b[at & EH_BUF_MASK];
		/* The lowest zero byte, exactly. */
		__u64 z = (w - 0x0101010101010101ULL) & ~w & 0x8080808080808080ULL;
		if (z) {
			__u64 lowest = z & (~z + 1);
			__u32 k = 0;
			if (lowest >> 39) {
				k += 4;
				lowest >>= 32;
			}
			if (lowest >> 23) {
				k += 2;
				lowest >>= 16;
			}
			if (lowest >> 15)
				k += 1;
			if (at + k >= end)
				return EH_TRUNCATED_META;
			/* Keep the bytes before the NUL. */
			w &= k ? (~0ULL >> (64 - 8 * k)) : 0;
			h ^= w;
			h *= EH_FNV_PRIME;
			*hash = eh_fmix(h);
			*next = at + k + 1;
			return EH_OK;
		}
		h ^= w;
		h *= EH_FNV_PRIME;
	}
	return end - pos > EH_MAX_NAME_LEN ? EH_TOO_LARGE : EH_TRUNCATED_META;
}

static __always_inline __u32 eh_fixed_size(__u32 base)
{
	switch (base) {
	case EH_ENC_VALUE8:
		return 1;
	case EH_ENC_VALUE16:
		return 2;
	case EH_ENC_VALUE32:
		return 4;
	case EH_ENC_VALUE64:
		return 8;
	case EH_ENC_VALUE128:
		return 16;
	}
	return 0;
}

/* State of a scan for the terminator of a zero-terminated string. */
struct eh_zscan {
	const struct eh_buf *buf;
	__u32 pos, n, unit;
	__u32 end; /* past the terminator, once found */
};

/* eh_zscan_step checks the 8 bytes at pos + 8*i: a bpf_loop callback. */
static long eh_zscan_step(__u32 i, struct eh_zscan *z)
{
	__u32 at = z->pos + i * 8;
	__u32 k = 8; /* offset of the terminator in the word, 8: none */

	if (at >= z->n)
		return 1;
	__u64 w = *(const __u64 *)&z->buf->b[at & EH_BUF_MASK];
	if (z->unit == 1) {
		__u64 t = (w - 0x0101010101010101ULL) & ~w & 0x8080808080808080ULL;
		if (t) {
			__u64 lowest = t & (~t + 1);
			k = 0;
			if (lowest >> 39) {
				k += 4;
				lowest >>= 32;
			}
			if (lowest >> 23) {
				k += 2;
				lowest >>= 16;
			}
			if (lowest >> 15)
				k += 1;
		}
	} else if (z->unit == 2) {
		if (!(w & 0xffff))
			k = 0;
		else if (!(w & 0xffff0000ULL))
			k = 2;
		else if (!(w & 0xffff00000000ULL))
			k = 4;
		else if (!(w & 0xffff000000000000ULL))
			k = 6;
	} else {
		if (!(w & 0xffffffffULL))
			k = 0;
		else if (!(w >> 32))
			k = 4;
	}
	if (k == 8)
		return 0;
	if (at + k + z->unit > z->n)
		return 1; /* the terminator is past the data */
	z->end = at + k + z->unit;
	return 1;
}

/*
 * eh_zstring_end returns in *end where the zero-terminated string of
 * base's code units (1, 2 or 4 bytes) at pos ends, past its terminator, or
 * a reason.
 */
static __always_inline __u32 eh_zstring_end(const struct eh_buf *buf, const struct eh_walk *w, __u32 base, __u32 pos,
					    __u32 *end)
{
	struct eh_zscan z = {
		.buf = buf,
		.pos = pos,
		.n = w->n,
		.unit = base == EH_ENC_ZSTRING_CHAR8 ? 1 : base == EH_ENC_ZSTRING_CHAR16 ? 2 : 4,
	};

	bpf_loop(EH_BUF_SIZE / 8, eh_zscan_step, &z, 0);
	if (!z.end)
		return eh_reason_short(w, EH_TRUNCATED_DATA);
	*end = z.end;
	return EH_OK;
}

/* eh_counted_end returns where the counted value (u16 length in units of
 * unit bytes, then the units) at pos ends, or 0 past the data. */
static __always_inline __u32 eh_counted_end(const struct eh_buf *buf, __u32 n, __u32 pos, __u32 unit)
{
	if (pos + 2 > n)
		return 0;
	__u32 e = pos + 2 + (__u32)eh_u16(buf, pos) * unit;
	return e > n ? 0 : e;
}

/* One field definition and its value: a bpf_loop callback. */
static long eh_field(__u32 i, struct eh_loop_ctx *c)
{
	struct eh_scratch *sc = c->s;
	if (!sc)
		return 1;
	const struct eh_buf *buf = &sc->buf;
	struct eh_walk *w = &sc->walk;
	__u64 nh;
	__u32 next, r;

	if (w->nwant && w->found == w->nwant)
		return 1;
	if (w->mpos >= w->mend) {
		if (w->depth)
			w->reason = EH_BAD_STRUCT;
		else if (w->found < w->nwant)
			w->reason = EH_MISSING_FIELD;
		else
			w->reason = EH_OK;
		return 1;
	}
	r = eh_name(buf, w->mpos, w->mend, &nh, &next);
	if (r) {
		w->reason = r;
		return 1;
	}
	__u32 mpos = next;
	if (mpos >= w->mend) {
		w->reason = EH_TRUNCATED_META;
		return 1;
	}
	__u8 enc = buf->b[mpos & EH_BUF_MASK];
	__u8 fmt = 0;
	mpos++;
	if (enc & EH_ENC_CHAIN) {
		if (mpos >= w->mend) {
			w->reason = EH_TRUNCATED_META;
			return 1;
		}
		fmt = buf->b[mpos & EH_BUF_MASK];
		mpos++;
		if (fmt & EH_FMT_CHAIN) {
			if (mpos + 2 > w->mend) {
				w->reason = EH_TRUNCATED_META;
				return 1;
			}
			mpos += 2; /* the field tag */
		}
	}
	if ((enc & EH_ENC_CARRAY) && (enc & EH_ENC_VARRAY)) {
		w->reason = EH_UNSUPPORTED;
		return 1;
	}
	__u32 alen = 0;
	if (enc & EH_ENC_CARRAY) {
		if (mpos + 2 > w->mend) {
			w->reason = EH_TRUNCATED_META;
			return 1;
		}
		alen = eh_u16(buf, mpos);
		mpos += 2;
		if (!alen) {
			w->reason = EH_UNSUPPORTED;
			return 1;
		}
	}
	w->mpos = mpos;
	__u32 depth = w->depth;
	if (depth > EH_MAX_DEPTH) {
		w->reason = EH_BAD_STRUCT;
		return 1;
	}
	__u64 h = eh_path_hash(w->hash[depth & (EH_DEPTH_SLOTS - 1)], nh);
	__u32 base = enc & EH_ENC_MASK;
	if (base == EH_ENC_STRUCT) {
		__u32 cnt = fmt & EH_FMT_MASK;
		if (enc & (EH_ENC_CARRAY | EH_ENC_VARRAY)) {
			w->reason = EH_UNSUPPORTED;
			return 1;
		}
		if (!cnt || depth >= EH_MAX_DEPTH) {
			w->reason = EH_BAD_STRUCT;
			return 1;
		}
		depth++;
		w->depth = depth;
		w->remaining[depth & (EH_DEPTH_SLOTS - 1)] = cnt;
		w->hash[depth & (EH_DEPTH_SLOTS - 1)] = h;
		return 0;
	}
	if (base == EH_ENC_INVALID || base >= EH_ENC_MAX) {
		w->reason = EH_UNSUPPORTED;
		return 1;
	}
	__u32 start = w->dpos, dpos = start;
	__u32 count = 1;
	if (enc & EH_ENC_VARRAY) {
		if (dpos + 2 > w->n) {
			w->reason = eh_reason_short(w, EH_TRUNCATED_DATA);
			return 1;
		}
		count = eh_u16(buf, dpos);
		dpos += 2;
	} else if (enc & EH_ENC_CARRAY) {
		count = alen;
	}
	__u32 size = eh_fixed_size(base);
	if (size) {
		if (dpos + count * size > w->n) {
			w->reason = eh_reason_short(w, EH_TRUNCATED_DATA);
			return 1;
		}
		dpos += count * size;
	} else if (base >= EH_ENC_ZSTRING_CHAR8 && base <= EH_ENC_ZSTRING_CHAR32) {
		__u32 end = 0;
		/* Arrays of zero-terminated strings are not walked. */
		if (enc & (EH_ENC_CARRAY | EH_ENC_VARRAY)) {
			w->reason = EH_UNSUPPORTED;
			return 1;
		}
		r = eh_zstring_end(buf, w, base, dpos, &end);
		if (r) {
			w->reason = r;
			return 1;
		}
		dpos = end;
	} else {
		__u32 unit = base == EH_ENC_STRING16_CHAR16 ? 2 : base == EH_ENC_STRING16_CHAR32 ? 4 : 1;
		if (count > EH_MAX_ELEMS) {
			w->reason = EH_TOO_LARGE;
			return 1;
		}
		for (__u32 e = 0; e < EH_MAX_ELEMS; e++) {
			if (e >= count)
				break;
			__u32 end = eh_counted_end(buf, w->n, dpos, unit);
			if (!end) {
				w->reason = eh_reason_short(w, EH_TRUNCATED_DATA);
				return 1;
			}
			dpos = end;
		}
	}
	w->dpos = dpos;
	for (__u32 k = 0; k < EH_MAX_WANT; k++) {
		if (k >= w->nwant)
			break;
		struct eh_loc *l = &w->loc[k & (EH_WANT_SLOTS - 1)];
		if (w->want[k & (EH_WANT_SLOTS - 1)] == h && !l->enc) {
			l->off = start;
			l->size = dpos - start;
			l->enc = enc;
			l->fmt = fmt;
			w->found++;
		}
	}
	/* One member done; a struct whose members are all done is one
	 * member of its parent done. */
	for (int k = 0; k < EH_MAX_DEPTH; k++) {
		if (!depth)
			break;
		__u32 left = w->remaining[depth & (EH_DEPTH_SLOTS - 1)] - 1;
		w->remaining[depth & (EH_DEPTH_SLOTS - 1)] = left;
		if (left)
			break;
		depth--;
	}
	w->depth = depth;
	return 0;
}

/*
 * eh_walk_event decodes the header and the extensions of the n bytes in
 * buf, then the event name, and returns its hash in *name_hash with the
 * walk set up to find fields: call eh_walk_fields next with the wanted
 * hashes. Returns EH_OK or the reason the event cannot be read.
 */
static __always_inline __u32 eh_walk_event(struct eh_scratch *sc, __u64 *name_hash)
{
	const struct eh_buf *buf = &sc->buf;
	struct eh_walk *w = &sc->walk;
	__u32 n = w->n;

	if (n < EH_HEADER_SIZE)
		return EH_SHORT;
	__u8 flags = buf->b[0];
	if (!(flags & EH_FLAG_LITTLE_ENDIAN))
		return EH_BIG_ENDIAN;
	if (!(flags & EH_FLAG_EXTENSION))
		return EH_NO_METADATA;
	__u32 pos = EH_HEADER_SIZE, ms = 0, me = 0;
	int last = 0;
	for (int i = 0; i < EH_MAX_EXT; i++) {
		if (pos + 4 > n)
			return eh_reason_short(w, EH_BAD_EXTENSION);
		__u32 size = eh_u16(buf, pos);
		__u16 kind = eh_u16(buf, pos + 2);
		__u32 body = pos + 4, end = body + size;
		__u32 k = kind & EH_EXT_KIND_MASK;
		if (k == EH_EXT_METADATA) {
			if (end > n)
				return eh_reason_short(w, EH_TRUNCATED_META);
			ms = body;
			me = end;
		} else {
			if (end > n)
				return eh_reason_short(w, EH_BAD_EXTENSION);
			if (k == EH_EXT_ACTIVITY_ID && size != 16 && size != 32)
				return EH_BAD_EXTENSION;
		}
		pos = end;
		if (!(kind & EH_EXT_CHAIN)) {
			last = 1;
			break;
		}
	}
	if (!last)
		return EH_BAD_EXTENSION;
	if (!me)
		return EH_NO_METADATA;
	__u32 next;
	__u32 r = eh_name(buf, ms, me, name_hash, &next);
	if (r)
		return r;
	w->mpos = next;
	w->mend = me;
	w->dpos = pos;
	return EH_OK;
}

/*
 * eh_walk_fields walks the field definitions until every one of the
 * nwant path hashes in want is found (every field when nwant is 0).
 */
static __always_inline __u32 eh_walk_fields(struct eh_scratch *sc, const __u64 *want, __u32 nwant)
{
	struct eh_walk *w = &sc->walk;
	struct eh_loop_ctx c = {.s = sc};

	if (nwant > EH_MAX_WANT)
		nwant = EH_MAX_WANT;
	__builtin_memcpy(w->want, want, sizeof(w->want));
	w->nwant = nwant;
	w->found = 0;
	w->depth = 0;
	w->hash[0] = 0;
	w->reason = EH_TOO_LARGE; /* unless an iteration says otherwise */
	__builtin_memset(w->loc, 0, sizeof(w->loc));
	long loops = bpf_loop(EH_MAX_FIELDS, eh_field, &c, 0);
	if (loops < 0)
		return EH_TOO_LARGE;
	if (w->nwant && w->found == w->nwant)
		return EH_OK;
	/* All EH_MAX_FIELDS iterations ran: the reason depends on where the
	 * walk stopped. */
	if (loops == EH_MAX_FIELDS && w->reason == EH_TOO_LARGE) {
		if (w->mpos >= w->mend && !w->depth)
			return w->found < w->nwant ? EH_MISSING_FIELD : EH_OK;
		return EH_TOO_LARGE;
	}
	return w->reason;
}

/* eh_str gives where a wanted char8 string's bytes are. */
static __always_inline __u32 eh_str(const struct eh_walk *w, __u32 k, __u32 *off, __u32 *len)
{
	const struct eh_loc *l = &w->loc[k & (EH_WANT_SLOTS - 1)];

	if (!l->enc)
		return EH_MISSING_FIELD;
	if (l->enc & (EH_ENC_CARRAY | EH_ENC_VARRAY))
		return EH_FIELD_TYPE;
	switch (l->enc & EH_ENC_MASK) {
	case EH_ENC_STRING16_CHAR8:
	case EH_ENC_BINARY16_CHAR8:
		*off = l->off + 2;
		*len = l->size - 2;
		return EH_OK;
	case EH_ENC_ZSTRING_CHAR8:
		*off = l->off;
		*len = l->size - 1;
		return EH_OK;
	}
	return EH_FIELD_TYPE;
}

/*
 * eh_uint gives a wanted integer field (1, 2, 4 or 8 bytes), sign-extended
 * when its format is signed_int.
 */
static __always_inline __u32 eh_uint(const struct eh_buf *buf, const struct eh_walk *w, __u32 k, __u64 *v)
{
	const struct eh_loc *l = &w->loc[k & (EH_WANT_SLOTS - 1)];
	const __u8 *p;
	int sgn;

	if (!l->enc)
		return EH_MISSING_FIELD;
	if (l->enc & (EH_ENC_CARRAY | EH_ENC_VARRAY))
		return EH_FIELD_TYPE;
	p = &buf->b[l->off & EH_BUF_MASK];
	sgn = (l->fmt & EH_FMT_MASK) == EH_FMT_SIGNED_INT;
	switch (l->enc & EH_ENC_MASK) {
	case EH_ENC_VALUE8:
		*v = sgn ? (__u64)(__s64)(__s8)p[0] : p[0];
		return EH_OK;
	case EH_ENC_VALUE16:
		*v = sgn ? (__u64)(__s64) * (const __s16 *)p : *(const __u16 *)p;
		return EH_OK;
	case EH_ENC_VALUE32:
		*v = sgn ? (__u64)(__s64) * (const __s32 *)p : *(const __u32 *)p;
		return EH_OK;
	case EH_ENC_VALUE64:
		*v = *(const __u64 *)p;
		return EH_OK;
	}
	return EH_FIELD_TYPE;
}

static __always_inline int eh_digits(const __u8 *b, __u32 off, __u32 n, __u32 *v)
{
	__u32 x = 0;

#pragma unroll
	for (int i = 0; i < 4; i++) {
		if (i >= n)
			break;
		__u8 c = b[(off + i) & EH_BUF_MASK];
		if (c < '0' || c > '9')
			return -1;
		x = x * 10 + (c - '0');
	}
	*v = x;
	return 0;
}

static __always_inline __u32 eh_days_in(__u32 y, __u32 m)
{
	if (m == 2)
		return (y % 4 == 0 && (y % 100 != 0 || y % 400 == 0)) ? 29 : 28;
	if (m == 4 || m == 6 || m == 9 || m == 11)
		return 30;
	return 31;
}

/*
 * eh_parse_time parses the RFC 3339 time of len bytes at off in buf:
 * YYYY-MM-DDTHH:MM:SS[.fraction](Z|+HH:MM|-HH:MM), T and Z in either case,
 * a fraction of any length (its first nine digits are the nanoseconds).
 * internal/eventheader ParseRFC3339 accepts the same strings.
 */
struct eh_time {
	__s64 sec;
	__u32 nsec;
	__u32 _pad;
};

/*
 * A global function: the verifier checks it once, not at every call. It
 * returns 0, or -1 for a string that is not an RFC 3339 time (or a NULL
 * argument, which the verifier makes every global function handle).
 */
__attribute__((noinline)) int eh_parse_time(const struct eh_buf *buf, __u32 off, __u32 len, struct eh_time *t)
{
	__u32 Y, M, D, h, mi, s, c;

	if (!buf || !t)
		return -1;
	const __u8 *b = buf->b;
	if (len < 20 || len > EH_TIME_MAX)
		return -1;
	if (eh_digits(b, off, 4, &Y) || eh_digits(b, off + 5, 2, &M) || eh_digits(b, off + 8, 2, &D) ||
	    eh_digits(b, off + 11, 2, &h) || eh_digits(b, off + 14, 2, &mi) || eh_digits(b, off + 17, 2, &s))
		return -1;
	c = b[(off + 10) & EH_BUF_MASK];
	if (b[(off + 4) & EH_BUF_MASK] != '-' || b[(off + 7) & EH_BUF_MASK] != '-' || (c != 'T' && c != 't') ||
	    b[(off + 13) & EH_BUF_MASK] != ':' || b[(off + 16) & EH_BUF_MASK] != ':')
		return -1;
	if (M < 1 || M > 12 || D < 1 || D > eh_days_in(Y, M) || h > 23 || mi > 59 || s > 60)
		return -1;
	__u32 i = 19, ns = 0;
	if (b[(off + 19) & EH_BUF_MASK] == '.') {
		__u32 digits = 0;
		i = 20;
		for (int k = 0; k < EH_TIME_MAX - 20; k++) {
			if (i >= len)
				break;
			c = b[(off + i) & EH_BUF_MASK];
			if (c < '0' || c > '9')
				break;
			if (digits < 9)
				ns = ns * 10 + (c - '0');
			digits++;
			i++;
		}
		if (!digits)
			return -1;
#pragma unroll
		for (int k = 0; k < 8; k++)
			if (digits + k < 9)
				ns *= 10;
	}
	if (i >= len)
		return -1;
	c = b[(off + i) & EH_BUF_MASK];
	__s64 tz = 0;
	if (c == 'Z' || c == 'z') {
		i++;
	} else if (c == '+' || c == '-') {
		__u32 oh, om;
		if (len - i != 6 || b[(off + i + 3) & EH_BUF_MASK] != ':')
			return -1;
		if (eh_digits(b, off + i + 1, 2, &oh) || eh_digits(b, off + i + 4, 2, &om) || oh > 23 || om > 59)
			return -1;
		tz = oh * 3600 + om * 60;
		if (c == '-')
			tz = -tz;
		i += 6;
	} else {
		return -1;
	}
	if (i != len)
		return -1;
	/* Days from 1970-01-01 (Howard Hinnant's days_from_civil), the
	 * year shifted by 400 (146097 days) so nothing is negative. */
	__u64 y = (__u64)Y + 400 - (M <= 2);
	__u64 era = y / 400;
	__u64 yoe = y - era * 400;
	__u64 mp = M > 2 ? M - 3 : M + 9;
	__u64 doy = (153 * mp + 2) / 5 + D - 1;
	__u64 doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
	__s64 days = (__s64)(era * 146097 + doe) - 719468 - 146097;
	t->sec = days * 86400 + (__s64)(h * 3600 + mi * 60 + s) - tz;
	t->nsec = ns;
	return 0;
}

static __always_inline int eh_unhex(__u8 c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	if (c >= 'A' && c <= 'F')
		return c - 'A' + 10;
	return -1;
}

struct eh_id {
	__u8 b[16];
};

/* eh_hex_id decodes exactly 2*n hex digits at off into dst (n <= 16): a
 * global function, checked once. */
__attribute__((noinline)) int eh_hex_id(const struct eh_buf *buf, __u32 off, __u32 len, struct eh_id *dst, __u32 n)
{
	if (!buf || !dst || n > 16 || len != 2 * n)
		return -1;
	for (int i = 0; i < 16; i++) {
		if (i >= n)
			break;
		int hi = eh_unhex(buf->b[(off + 2 * i) & EH_BUF_MASK]);
		int lo = eh_unhex(buf->b[(off + 2 * i + 1) & EH_BUF_MASK]);
		if (hi < 0 || lo < 0)
			return -1;
		dst->b[i] = hi << 4 | lo;
	}
	return 0;
}

#endif
