// SPDX-License-Identifier: (Apache-2.0 OR BSD-2-Clause)
/*
 * spanwatch.node: the native part of the Node.js SDK, an N-API addon built
 * from include/spanwatch.h (its own copy of libspanwatch: its own marker
 * and probe word, and a file name with "spanwatch" in it, so that the
 * agent's /proc scan finds it in every process that loaded it).
 *
 * The probe word is handed to JavaScript as an ArrayBuffer over the
 * addon's own data (it never moves: the addon is never unloaded), so that
 * index.js tests it with one typed-array load and calls into C only while
 * someone listens.
 */
#include <node_api.h>

#include "../../../include/spanwatch.h"

static struct spanwatch sw;

#define CHECK(call)                            \
	do {                                   \
		if ((call) != napi_ok)         \
			return NULL;           \
	} while (0)

/* name copies a string argument into the event's name field (at most
 * SPANWATCH_NAME_LEN bytes, whole characters: the agent cuts names at 127),
 * NUL-padded. */
static int name(napi_env env, napi_value v, struct spanwatch_event *ev)
{
	char buf[SPANWATCH_NAME_LEN + 1]; /* napi adds a NUL */
	size_t n = 0;

	if (napi_get_value_string_utf8(env, v, buf, sizeof(buf), &n) != napi_ok) {
		napi_throw_type_error(env, NULL, "spanwatch: a span name must be a string");
		return -1;
	}
	spanwatch_fill_name_(ev, buf, n);
	return 0;
}

/* id reads an optional id (undefined, null, or a Buffer/Uint8Array of n
 * bytes) into out; returns 1 when given, 0 when not, -1 on a bad value. */
static int id(napi_env env, napi_value v, uint8_t *out, size_t n)
{
	napi_valuetype t;
	bool is;
	void *data;
	size_t len;

	if (napi_typeof(env, v, &t) != napi_ok || t == napi_undefined || t == napi_null)
		return 0;
	if (napi_is_typedarray(env, v, &is) == napi_ok && is) {
		napi_typedarray_type tt;
		napi_value ab;
		size_t off;

		if (napi_get_typedarray_info(env, v, &tt, &len, &data, &ab, &off) == napi_ok && tt == napi_uint8_array &&
		    len == n) {
			memcpy(out, data, n);
			return 1;
		}
	}
	napi_throw_type_error(env, NULL, "spanwatch: trace ids are 16 bytes, span ids 8 (a Buffer or Uint8Array)");
	return -1;
}

static uint64_t u64(napi_env env, napi_value v)
{
	uint64_t x = 0;
	bool lossless;
	double d;

	if (napi_get_value_bigint_uint64(env, v, &x, &lossless) == napi_ok)
		return x;
	if (napi_get_value_double(env, v, &d) == napi_ok && d > 0)
		return (uint64_t)d;
	return 0;
}

/* record(name, durationNs, startNs, error, traceId, spanId) */
static napi_value spanwatch_js_record(napi_env env, napi_callback_info info)
{
	napi_value argv[6];
	size_t argc = 6;
	struct spanwatch_event ev;
	bool err = false;

	CHECK(napi_get_cb_info(env, info, &argc, argv, NULL, NULL));
	if (argc < 4) {
		napi_throw_type_error(env, NULL, "spanwatch: record(name, durationNs, startNs, error[, traceId, spanId])");
		return NULL;
	}
	memset(&ev, 0, sizeof(ev));
	if (name(env, argv[0], &ev) < 0)
		return NULL;
	ev.duration_ns = u64(env, argv[1]);
	ev.start_ns = u64(env, argv[2]);
	napi_get_value_bool(env, argv[3], &err);
	ev.status = err ? SPANWATCH_STATUS_ERROR : SPANWATCH_STATUS_OK;
	if ((argc > 4 && id(env, argv[4], ev.trace_id, 16) < 0) || (argc > 5 && id(env, argv[5], ev.span_id, 8) < 0))
		return NULL;
	spanwatch_emit_event(&sw, &ev);
	return NULL;
}

/* start(name, startNs, traceId, spanId): a span began on this thread. */
static napi_value spanwatch_js_start(napi_env env, napi_callback_info info)
{
	napi_value argv[4];
	size_t argc = 4;
	struct spanwatch_event ev;

	CHECK(napi_get_cb_info(env, info, &argc, argv, NULL, NULL));
	if (argc < 2) {
		napi_throw_type_error(env, NULL, "spanwatch: start(name, startNs[, traceId, spanId])");
		return NULL;
	}
	memset(&ev, 0, sizeof(ev));
	if (name(env, argv[0], &ev) < 0)
		return NULL;
	ev.start_ns = u64(env, argv[1]);
	ev.flags = SPANWATCH_F_START;
	if ((argc > 2 && id(env, argv[2], ev.trace_id, 16) < 0) || (argc > 3 && id(env, argv[3], ev.span_id, 8) < 0))
		return NULL;
	spanwatch_emit_event(&sw, &ev);
	return NULL;
}

/* realtimeNs(): CLOCK_REALTIME as a BigInt, the start times the agent
 * pairs starts and ends by. */
static napi_value spanwatch_js_realtime(napi_env env, napi_callback_info info)
{
	napi_value v;

	(void)info;
	CHECK(napi_create_bigint_uint64(env, spanwatch_clock_ns_(CLOCK_REALTIME), &v));
	return v;
}

static napi_value spanwatch_js_mode(napi_env env, napi_callback_info info)
{
	const char *m = "off";
	napi_value v;

	(void)info;
	if (sw.mode == SPANWATCH_MODE_USER_EVENTS)
		m = "user_events";
	else if (sw.mode == SPANWATCH_MODE_MARKER)
		m = "marker";
	CHECK(napi_create_string_utf8(env, m, NAPI_AUTO_LENGTH, &v));
	return v;
}

static napi_value spanwatch_js_error(napi_env env, napi_callback_info info)
{
	napi_value v;

	(void)info;
	CHECK(napi_create_int32(env, sw.error, &v));
	return v;
}

static napi_value init(napi_env env, napi_value exports)
{
	napi_value word;
	napi_property_descriptor props[] = {
		{"record", NULL, spanwatch_js_record, NULL, NULL, NULL, napi_default, NULL},
		{"start", NULL, spanwatch_js_start, NULL, NULL, NULL, napi_default, NULL},
		{"realtimeNs", NULL, spanwatch_js_realtime, NULL, NULL, NULL, napi_default, NULL},
		{"mode", NULL, spanwatch_js_mode, NULL, NULL, NULL, napi_default, NULL},
		{"error", NULL, spanwatch_js_error, NULL, NULL, NULL, napi_default, NULL},
		{"word", NULL, NULL, NULL, NULL, NULL, napi_default, NULL},
	};

	spanwatch_open(&sw);
	/* The probe word itself, 8 bytes: non-zero while someone listens. */
	if (napi_create_external_arraybuffer(env, (void *)&spanwatch_probe_.word, sizeof(spanwatch_probe_.word), NULL,
					     NULL, &word) != napi_ok)
		return NULL;
	props[5].value = word;
	CHECK(napi_define_properties(env, exports, sizeof(props) / sizeof(props[0]), props));
	return exports;
}

NAPI_MODULE(NODE_GYP_MODULE_NAME, init)
