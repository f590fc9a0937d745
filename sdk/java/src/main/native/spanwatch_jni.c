// SPDX-License-Identifier: (Apache-2.0 OR BSD-2-Clause)
/*
 * libspanwatch_jni.so: the native part of the Java SDK (io.spanwatch), built
 * from include/spanwatch.h (its own copy of libspanwatch: its own marker and
 * probe word, and a file name with "spanwatch" in it, so that the agent's
 * /proc scan finds it in every JVM that loaded it). JNI, not the FFM API:
 * OpenJDK 17's FFM is an incubator module (jdk.incubator.foreign, a
 * different API from the final one of 22) that needs --add-modules.
 *
 * The natives are bound by RegisterNatives to functions named spanwatch_*,
 * which reports leave out of stacks like the other SDKs' own frames.
 */
#include <jni.h>

#include "../../../../../include/spanwatch.h"

static struct spanwatch sw;

/* name copies a Java string into the event's name as UTF-8 (whole
 * characters, at most SPANWATCH_NAME_LEN bytes: the agent cuts names at
 * 127), from its UTF-16 without allocating. */
static void name(JNIEnv *env, jstring s, struct spanwatch_event *ev)
{
	jchar buf[SPANWATCH_NAME_LEN];
	jsize n = (*env)->GetStringLength(env, s), k = 0;
	size_t o = 0;

	if (n > SPANWATCH_NAME_LEN)
		n = SPANWATCH_NAME_LEN;
	(*env)->GetStringRegion(env, s, 0, n, buf);
	while (k < n) {
		uint32_t c = buf[k++];
		char u[4];
		size_t m;

		if (c >= 0xd800 && c < 0xdc00 && k < n && buf[k] >= 0xdc00 && buf[k] < 0xe000)
			c = 0x10000 + ((c - 0xd800) << 10) + (buf[k++] - 0xdc00);
		else if (c >= 0xd800 && c < 0xe000)
			c = 0xfffd; /* a lone surrogate */
		if (c < 0x80) {
			u[0] = (char)c, m = 1;
		} else if (c < 0x800) {
			u[0] = (char)(0xc0 | c >> 6), u[1] = (char)(0x80 | (c & 0x3f)), m = 2;
		} else if (c < 0x10000) {
			u[0] = (char)(0xe0 | c >> 12), u[1] = (char)(0x80 | (c >> 6 & 0x3f));
			u[2] = (char)(0x80 | (c & 0x3f)), m = 3;
		} else {
			u[0] = (char)(0xf0 | c >> 18), u[1] = (char)(0x80 | (c >> 12 & 0x3f));
			u[2] = (char)(0x80 | (c >> 6 & 0x3f)), u[3] = (char)(0x80 | (c & 0x3f)), m = 4;
		}
		if (o + m > SPANWATCH_NAME_LEN)
			break;
		memcpy(ev->name + o, u, m);
		o += m;
	}
}

static void ids(JNIEnv *env, jbyteArray trace, jbyteArray span, struct spanwatch_event *ev)
{
	if (trace != NULL && (*env)->GetArrayLength(env, trace) == 16)
		(*env)->GetByteArrayRegion(env, trace, 0, 16, (jbyte *)ev->trace_id);
	if (span != NULL && (*env)->GetArrayLength(env, span) == 8)
		(*env)->GetByteArrayRegion(env, span, 0, 8, (jbyte *)ev->span_id);
}

static void JNICALL spanwatch_jni_record(JNIEnv *env, jclass cls, jstring s, jlong duration, jlong start, jboolean error,
					 jbyteArray trace, jbyteArray span)
{
	struct spanwatch_event ev;

	(void)cls;
	memset(&ev, 0, sizeof(ev));
	name(env, s, &ev);
	ev.duration_ns = duration > 0 ? (uint64_t)duration : 0;
	ev.start_ns = start > 0 ? (uint64_t)start : 0;
	ev.status = error ? SPANWATCH_STATUS_ERROR : SPANWATCH_STATUS_OK;
	ids(env, trace, span, &ev);
	spanwatch_emit_event(&sw, &ev);
}

static void JNICALL spanwatch_jni_start(JNIEnv *env, jclass cls, jstring s, jlong start, jbyteArray trace,
					jbyteArray span)
{
	struct spanwatch_event ev;

	(void)cls;
	memset(&ev, 0, sizeof(ev));
	name(env, s, &ev);
	ev.start_ns = start > 0 ? (uint64_t)start : 0;
	ev.flags = SPANWATCH_F_START;
	ids(env, trace, span, &ev);
	spanwatch_emit_event(&sw, &ev);
}

static jobject JNICALL spanwatch_jni_word(JNIEnv *env, jclass cls)
{
	(void)cls;
	return (*env)->NewDirectByteBuffer(env, (void *)&spanwatch_probe_.word, sizeof(spanwatch_probe_.word));
}

static jint JNICALL spanwatch_jni_mode(JNIEnv *env, jclass cls)
{
	(void)env, (void)cls;
	return (jint)sw.mode;
}

static jlong JNICALL spanwatch_jni_realtime(JNIEnv *env, jclass cls)
{
	(void)env, (void)cls;
	return (jlong)spanwatch_clock_ns_(CLOCK_REALTIME);
}

JNIEXPORT jint JNICALL JNI_OnLoad(JavaVM *vm, void *reserved)
{
	JNIEnv *env;
	jclass cls;
	JNINativeMethod methods[] = {
		{"nativeWord", "()Ljava/nio/ByteBuffer;", (void *)spanwatch_jni_word},
		{"nativeMode", "()I", (void *)spanwatch_jni_mode},
		{"nativeRealtimeNs", "()J", (void *)spanwatch_jni_realtime},
		{"nativeStart", "(Ljava/lang/String;J[B[B)V", (void *)spanwatch_jni_start},
		{"nativeRecord", "(Ljava/lang/String;JJZ[B[B)V", (void *)spanwatch_jni_record},
	};

	(void)reserved;
	if ((*vm)->GetEnv(vm, (void **)&env, JNI_VERSION_1_8) != JNI_OK)
		return JNI_ERR;
	cls = (*env)->FindClass(env, "io/spanwatch/Spanwatch");
	if (cls == NULL ||
	    (*env)->RegisterNatives(env, cls, methods, (jint)(sizeof(methods) / sizeof(methods[0]))) != 0)
		return JNI_ERR;
	spanwatch_open(&sw);
	return JNI_VERSION_1_8;
}
