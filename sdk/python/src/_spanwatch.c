// SPDX-License-Identifier: (Apache-2.0 OR BSD-2-Clause)
/*
 * spanwatch._spanwatch: the native part of the Python SDK, built from
 * include/spanwatch.h (libspanwatch's source: this extension carries its own
 * copy, with its own marker and probe word, and its file name contains
 * "spanwatch" so that the agent's /proc scan finds it in every process that
 * imported it).
 *
 * While nobody listens, span() returns a shared no-op context manager and a
 * traced function calls the function it wraps: one load and a branch in C.
 *
 * Python frames in stacks. The agent walks user stacks by frame pointers
 * and names code through ELF symbols or a JIT's perf map; CPython 3.11 has
 * neither for Python functions (its interpreter, built without frame
 * pointers, runs them all in _PyEval_EvalFrameDefault; 3.12's perf
 * trampoline, -X perf, does not exist in 3.11). So when a span ends while
 * someone listens, this module reads the thread's Python frames (frames.c:
 * the _PyInterpreterFrame chain) and hands the span to the agent through a
 * chain of small native trampolines, one per Python function, each with a
 * frame of its own and named in /tmp/perf-PID.map as "py::QUALNAME:FILE"
 * (the names CPython 3.12's trampolines use). The stack the agent takes at
 * the marker then reads: the marker, then the Python functions innermost
 * first. Trampolines are made once per code object (at most 65536; they
 * and their code objects are kept for the life of the process).
 * SPANWATCH_PYTHON_FRAMES=0 turns this off. x86-64 only.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>

#include <inttypes.h>
#include <stdio.h>
#include <sys/mman.h>
#include <sys/stat.h>

#include "../../../include/spanwatch.h"

int spanwatch_py_codes(PyObject **out, int max);

static struct spanwatch sw;

/* ---- Python frames as native frames ------------------------------------ */

#define MAX_PY_FRAMES 64
#define STUB_SIZE 16
#define STUBS_PER_REGION 4096
#define MAX_REGIONS 16
#define TABLE_SIZE (1 << 17) /* twice the most stubs: short probes */

/* A trampoline: a frame, then a call to the next target, taken from the
 * array %rsi points at (the event stays in %rdi). All are the same bytes;
 * only their addresses, named in the perf map, differ. */
static const unsigned char stub_code[STUB_SIZE] = {
	0x55,		        /* push %rbp */
	0x48, 0x89, 0xe5,       /* mov %rsp,%rbp */
	0x48, 0x8b, 0x06,       /* mov (%rsi),%rax */
	0x48, 0x83, 0xc6, 0x08, /* add $8,%rsi */
	0xff, 0xd0,	        /* call *%rax */
	0x5d,		        /* pop %rbp */
	0xc3,		        /* ret */
	0xcc,		        /* int3 */
};

typedef void (*stub_fn)(const struct spanwatch_event *ev, void *const *next);

struct frame_entry {
	PyObject *code; /* a strong reference: never freed, never reused */
	void *stub;	/* NULL: a frame of the SDK's own, left out */
};

static struct {
	int state; /* 0 not set up, 1 on, -1 off */
	unsigned char *regions[MAX_REGIONS];
	int nregions, used; /* used: stubs handed out in the last region */
	struct frame_entry *table;
	int count;
	int map_fd;
	volatile int forked; /* set in a child after fork: its map has its own pid */
	PyObject *skip; /* file names whose frames are the SDK's own */
	void *overflow; /* the trampoline of every function past the cap */
} fr = {.map_fd = -1};

static void forked_child(void) { fr.forked = 1; }

#if defined(__x86_64__)
static void *new_stub(void)
{
	if (fr.nregions == 0 || fr.used == STUBS_PER_REGION) {
		unsigned char *r;

		if (fr.nregions == MAX_REGIONS)
			return NULL;
		r = mmap(NULL, STUB_SIZE * STUBS_PER_REGION, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		if (r == MAP_FAILED)
			return NULL;
		for (int i = 0; i < STUBS_PER_REGION; i++)
			memcpy(r + i * STUB_SIZE, stub_code, STUB_SIZE);
		/* W^X: written once, then only executed. */
		if (mprotect(r, STUB_SIZE * STUBS_PER_REGION, PROT_READ | PROT_EXEC) != 0) {
			munmap(r, STUB_SIZE * STUBS_PER_REGION);
			return NULL;
		}
		fr.regions[fr.nregions++] = r;
		fr.used = 0;
	}
	return fr.regions[fr.nregions - 1] + STUB_SIZE * fr.used++;
}
#else
static void *new_stub(void) { return NULL; }
#endif

/* map_line writes a perf map line in one write(2). */
static void map_line(void *stub, const char *name)
{
	char line[2200];
	int n;

	if (fr.map_fd < 0)
		return;
	n = snprintf(line, sizeof(line), "%" PRIxPTR " %x %s\n", (uintptr_t)stub, STUB_SIZE, name);
	if (n > 0 && n < (int)sizeof(line)) {
		if (write(fr.map_fd, line, (size_t)n) != n) {
			/* A full disk: the frame keeps its address. */
		}
	}
}

/* code_name makes "py::QUALNAME:FILE", with newlines (a file name may have
 * them) replaced, cut at 2 KiB. */
static void code_name(PyObject *code, char *buf, size_t size)
{
	PyObject *q = PyObject_GetAttrString(code, "co_qualname");
	PyObject *f = PyObject_GetAttrString(code, "co_filename");
	const char *qs = NULL, *fs = NULL;

	if (q == NULL) {
		PyErr_Clear();
		q = PyObject_GetAttrString(code, "co_name");
	}
	if (q != NULL && PyUnicode_Check(q))
		qs = PyUnicode_AsUTF8(q);
	if (f != NULL && PyUnicode_Check(f))
		fs = PyUnicode_AsUTF8(f);
	if (PyErr_Occurred())
		PyErr_Clear();
	snprintf(buf, size, "py::%s:%s", qs ? qs : "?", fs ? fs : "?");
	for (char *p = buf; *p; p++)
		if (*p == '\n' || *p == '\r')
			*p = '?';
	Py_XDECREF(q);
	Py_XDECREF(f);
}

/* open_map opens this process's perf map, anew (a process of the same pid
 * may have left one), and writes the trampolines made so far: after a
 * fork the child's map has its own pid. */
static void open_map(void)
{
	char path[64];
	char name[2048];

	fr.forked = 0;
	snprintf(path, sizeof(path), "/tmp/perf-%d.map", (int)getpid());
	fr.map_fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_APPEND | O_CLOEXEC | O_NOFOLLOW, 0644);
	if (fr.map_fd < 0)
		return;
	if (fr.overflow)
		map_line(fr.overflow, "py::[functions past spanwatch's trampoline cap]");
	for (int i = 0; i < TABLE_SIZE; i++)
		if (fr.table[i].code && fr.table[i].stub && fr.table[i].stub != fr.overflow) {
			code_name(fr.table[i].code, name, sizeof(name));
			map_line(fr.table[i].stub, name);
		}
}

static void setup_frames(void)
{
	const char *env = getenv("SPANWATCH_PYTHON_FRAMES");

	fr.state = -1;
	if (!SPANWATCH_HAVE_MARKER || (env && !strcmp(env, "0")))
		return;
	fr.table = (struct frame_entry *)calloc(TABLE_SIZE, sizeof(*fr.table));
	if (fr.table == NULL)
		return;
	fr.overflow = new_stub();
	if (fr.overflow == NULL)
		return;
	open_map();
	if (fr.map_fd < 0)
		return; /* unnamed trampolines would only add [anon] frames */
	pthread_atfork(NULL, NULL, forked_child);
	fr.state = 1;
}

/* is_own reports whether code is the SDK's own Python code. */
static int is_own(PyObject *code)
{
	PyObject *f;
	int own = 0;

	if (fr.skip == NULL)
		return 0;
	f = PyObject_GetAttrString(code, "co_filename");
	if (f != NULL)
		own = PySet_Contains(fr.skip, f) == 1;
	Py_XDECREF(f);
	PyErr_Clear();
	return own;
}

/* stub_for returns code's trampoline, making it the first time; NULL for
 * the SDK's own frames. */
static void *stub_for(PyObject *code)
{
	size_t h = ((uintptr_t)code >> 4) * 0x9E3779B97F4A7C15ull;
	size_t i = h >> (64 - 17);
	char name[2048];

	for (;; i = (i + 1) & (TABLE_SIZE - 1)) {
		struct frame_entry *e = &fr.table[i];

		if (e->code == code)
			return e->stub;
		if (e->code != NULL)
			continue;
		if (fr.count >= TABLE_SIZE / 2)
			return fr.overflow;
		e->stub = NULL;
		if (!is_own(code)) {
			e->stub = new_stub();
			if (e->stub == NULL) {
				e->stub = fr.overflow;
			} else {
				code_name(code, name, sizeof(name));
				map_line(e->stub, name);
			}
		}
		Py_INCREF(code);
		e->code = code;
		fr.count++;
		return e->stub;
	}
}

/* spanwatch_py_emit_ is the innermost native frame below the trampolines: it
 * keeps a frame of its own (the extension is built with frame pointers). */
__attribute__((noinline)) static void spanwatch_py_emit_(const struct spanwatch_event *ev, void *const *next)
{
	(void)next;
	spanwatch_emit_event(&sw, ev);
	__asm__ volatile("" ::: "memory");
}

/* emit sends a finished span, through the trampolines of the calling
 * thread's Python frames when they are on; first is an innermost code
 * object to put above them (a traced function that has just returned), or
 * NULL. The GIL is held. */
static void emit(const struct spanwatch_event *ev, PyObject *first)
{
	PyObject *codes[MAX_PY_FRAMES];
	void *chain[MAX_PY_FRAMES + 1];
	int n = 0, k = 0;

	if (fr.state == 0)
		setup_frames();
	if (fr.state < 0) {
		spanwatch_emit_event(&sw, ev);
		return;
	}
	if (fr.forked) {
		if (fr.map_fd >= 0)
			close(fr.map_fd);
		open_map();
	}
	if (first != NULL)
		codes[n++] = first;
	n += spanwatch_py_codes(codes + n, MAX_PY_FRAMES - n);
	for (int i = n - 1; i >= 0; i--) {
		void *s = stub_for(codes[i]);

		if (s != NULL)
			chain[k++] = s;
	}
	chain[k] = (void *)spanwatch_py_emit_;
	((stub_fn)chain[0])(ev, &chain[1]);
}

/* ---- spans ------------------------------------------------------------- */

static uint64_t now_ns(clockid_t clk)
{
	return spanwatch_clock_ns_(clk);
}

/* ids reads an optional id: None, or bytes of exactly n. */
static int ids(PyObject *o, uint8_t *out, size_t n, const char *what, char *have)
{
	char *b;
	Py_ssize_t len;

	if (o == NULL || o == Py_None)
		return 0;
	if (!PyBytes_Check(o) || PyBytes_AsStringAndSize(o, &b, &len) < 0 || (size_t)len != n) {
		PyErr_Format(PyExc_ValueError, "%s must be None or %zu bytes", what, n);
		return -1;
	}
	memcpy(out, b, n);
	*have = 1;
	return 0;
}

/* name_utf8 returns a span name's UTF-8 bytes (cached by str). */
static const char *name_utf8(PyObject *name, Py_ssize_t *len)
{
	if (!PyUnicode_Check(name)) {
		PyErr_Format(PyExc_TypeError, "a span name must be a str, not %.100s", Py_TYPE(name)->tp_name);
		return NULL;
	}
	return PyUnicode_AsUTF8AndSize(name, len);
}

typedef struct {
	PyObject_HEAD
	PyObject *name;
	PyObject *code; /* traced: the function's code, the innermost frame at the end */
	uint64_t mono, real;
	uint8_t trace[16], span[8];
	char has_trace, has_span, error, noop, starts;
} SpanObject;

static PyTypeObject SpanType;
static SpanObject *noop_span;

static void span_begin(SpanObject *s)
{
	const char *n;
	Py_ssize_t len;

	s->mono = 0;
	if (!spanwatch_listening())
		return;
	s->mono = now_ns(CLOCK_MONOTONIC);
	s->real = now_ns(CLOCK_REALTIME);
	if (s->starts && (n = name_utf8(s->name, &len)) != NULL)
		spanwatch_emit_start_n(&sw, n, (size_t)len, s->real, 0, s->has_trace ? s->trace : NULL,
				       s->has_span ? s->span : NULL);
}

static void span_end(SpanObject *s, int error)
{
	struct spanwatch_event ev;
	const char *n;
	Py_ssize_t len;

	if (s->mono == 0 || !spanwatch_listening())
		return;
	if ((n = name_utf8(s->name, &len)) == NULL) {
		PyErr_Clear();
		return;
	}
	memset(&ev, 0, sizeof(ev));
	ev.duration_ns = now_ns(CLOCK_MONOTONIC) - s->mono;
	ev.start_ns = s->real;
	ev.status = error || s->error ? SPANWATCH_STATUS_ERROR : SPANWATCH_STATUS_OK;
	if (s->has_trace)
		memcpy(ev.trace_id, s->trace, 16);
	if (s->has_span)
		memcpy(ev.span_id, s->span, 8);
	spanwatch_fill_name_(&ev, n, (size_t)len);
	s->mono = 0;
	emit(&ev, s->code);
}

static void span_dealloc(SpanObject *s)
{
	Py_XDECREF(s->name);
	Py_XDECREF(s->code);
	Py_TYPE(s)->tp_free((PyObject *)s);
}

static PyObject *span_enter(SpanObject *s, PyObject *unused)
{
	(void)unused;
	if (!s->noop)
		span_begin(s);
	return Py_NewRef(s);
}

static PyObject *span_exit(SpanObject *s, PyObject *const *args, Py_ssize_t nargs)
{
	if (!s->noop)
		span_end(s, nargs > 0 && args[0] != Py_None);
	Py_RETURN_FALSE;
}

static PyObject *span_set_error(SpanObject *s, PyObject *const *args, Py_ssize_t nargs)
{
	if (!s->noop)
		s->error = nargs == 0 || PyObject_IsTrue(args[0]) == 1;
	Py_RETURN_NONE;
}

static PyObject *span_set_ids(SpanObject *s, PyObject *args, PyObject *kw)
{
	static char *kwlist[] = {"trace_id", "span_id", NULL};
	PyObject *t = NULL, *p = NULL;
	uint8_t trace[16], span[8];
	char ht = 0, hs = 0;

	if (!PyArg_ParseTupleAndKeywords(args, kw, "|OO", kwlist, &t, &p))
		return NULL;
	if (ids(t, trace, 16, "trace_id", &ht) < 0 || ids(p, span, 8, "span_id", &hs) < 0)
		return NULL;
	if (!s->noop) {
		if (ht)
			memcpy(s->trace, trace, 16), s->has_trace = 1;
		if (hs)
			memcpy(s->span, span, 8), s->has_span = 1;
	}
	Py_RETURN_NONE;
}

static PyMethodDef span_methods[] = {
	{"__enter__", (PyCFunction)span_enter, METH_NOARGS, NULL},
	{"__exit__", (PyCFunction)(void (*)(void))span_exit, METH_FASTCALL, NULL},
	{"set_error", (PyCFunction)(void (*)(void))span_set_error, METH_FASTCALL,
	 "set_error(error=True): mark the span failed (an exception leaving the block does too)."},
	{"set_ids", (PyCFunction)(void (*)(void))span_set_ids, METH_VARARGS | METH_KEYWORDS,
	 "set_ids(trace_id=None, span_id=None): the span's ids, 16 and 8 bytes."},
	{NULL, NULL, 0, NULL},
};

static PyTypeObject SpanType = {
	PyVarObject_HEAD_INIT(NULL, 0).tp_name = "spanwatch._spanwatch.Span",
	.tp_basicsize = sizeof(SpanObject),
	.tp_dealloc = (destructor)span_dealloc,
	.tp_flags = Py_TPFLAGS_DEFAULT,
	.tp_doc = "A span: a context manager that times its block (spanwatch.span).",
	.tp_methods = span_methods,
};

/* span(name, *, trace_id=None, span_id=None, start=True) */
static PyObject *mod_span(PyObject *mod, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames)
{
	SpanObject *s;
	PyObject *trace = NULL, *spanid = NULL, *start = NULL;
	Py_ssize_t nkw = kwnames ? PyTuple_GET_SIZE(kwnames) : 0;

	(void)mod;
	if (nargs != 1 || !PyUnicode_Check(args[0])) {
		PyErr_SetString(PyExc_TypeError, "span(name, *, trace_id=None, span_id=None, start=True): name must be a str");
		return NULL;
	}
	if (nkw == 0 && !spanwatch_listening())
		return Py_NewRef(noop_span);
	for (Py_ssize_t i = 0; i < nkw; i++) {
		const char *k = PyUnicode_AsUTF8(PyTuple_GET_ITEM(kwnames, i));

		if (k && !strcmp(k, "trace_id"))
			trace = args[nargs + i];
		else if (k && !strcmp(k, "span_id"))
			spanid = args[nargs + i];
		else if (k && !strcmp(k, "start"))
			start = args[nargs + i];
		else {
			PyErr_Format(PyExc_TypeError, "span() got an unexpected keyword argument %R",
				     PyTuple_GET_ITEM(kwnames, i));
			return NULL;
		}
	}
	s = PyObject_New(SpanObject, &SpanType);
	if (s == NULL)
		return NULL;
	s->name = Py_NewRef(args[0]);
	s->code = NULL;
	s->mono = s->real = 0;
	s->has_trace = s->has_span = s->error = s->noop = 0;
	s->starts = start == NULL || PyObject_IsTrue(start) == 1;
	if (ids(trace, s->trace, 16, "trace_id", &s->has_trace) < 0 ||
	    ids(spanid, s->span, 8, "span_id", &s->has_span) < 0) {
		Py_DECREF(s);
		return NULL;
	}
	if (!spanwatch_listening()) {
		Py_DECREF(s);
		return Py_NewRef(noop_span);
	}
	return (PyObject *)s;
}

/* ---- traced functions -------------------------------------------------- */

typedef struct {
	PyObject_HEAD
	PyObject *fn, *name, *code, *dict;
	vectorcallfunc vectorcall;
	char starts;
} TracedObject;

static PyObject *traced_call(TracedObject *t, PyObject *const *args, size_t nargsf, PyObject *kwnames)
{
	SpanObject s;
	PyObject *res;

	if (__builtin_expect(!spanwatch_listening(), 1))
		return PyObject_Vectorcall(t->fn, args, nargsf, kwnames);
	memset(&s, 0, sizeof(s));
	s.name = t->name;
	s.code = t->code;
	s.starts = t->starts;
	span_begin(&s);
	res = PyObject_Vectorcall(t->fn, args, nargsf, kwnames);
	if (res == NULL) {
		/* Keep the exception across the end. */
		PyObject *et, *ev, *tb;

		PyErr_Fetch(&et, &ev, &tb);
		span_end(&s, 1);
		PyErr_Restore(et, ev, tb);
	} else {
		span_end(&s, 0);
	}
	return res;
}

static PyObject *traced_new(PyTypeObject *type, PyObject *args, PyObject *kw)
{
	static char *kwlist[] = {"fn", "name", "start", NULL};
	PyObject *fn, *name;
	int start = 1;
	TracedObject *t;

	if (!PyArg_ParseTupleAndKeywords(args, kw, "OU|p", kwlist, &fn, &name, &start))
		return NULL;
	if (!PyCallable_Check(fn)) {
		PyErr_SetString(PyExc_TypeError, "Traced(fn, name): fn must be callable");
		return NULL;
	}
	t = (TracedObject *)type->tp_alloc(type, 0);
	if (t == NULL)
		return NULL;
	t->fn = Py_NewRef(fn);
	t->name = Py_NewRef(name);
	t->code = PyObject_GetAttrString(fn, "__code__");
	if (t->code == NULL)
		PyErr_Clear();
	else if (!PyCode_Check(t->code))
		Py_CLEAR(t->code);
	t->starts = (char)start;
	t->vectorcall = (vectorcallfunc)traced_call;
	return (PyObject *)t;
}

static int traced_traverse(TracedObject *t, visitproc visit, void *arg)
{
	Py_VISIT(t->fn);
	Py_VISIT(t->dict);
	return 0;
}

static int traced_clear(TracedObject *t)
{
	Py_CLEAR(t->fn);
	Py_CLEAR(t->name);
	Py_CLEAR(t->code);
	Py_CLEAR(t->dict);
	return 0;
}

static void traced_dealloc(TracedObject *t)
{
	PyObject_GC_UnTrack(t);
	traced_clear(t);
	Py_TYPE(t)->tp_free((PyObject *)t);
}

static PyObject *traced_get(PyObject *self, PyObject *obj, PyObject *type)
{
	(void)type;
	if (obj == NULL || obj == Py_None)
		return Py_NewRef(self);
	return PyMethod_New(self, obj);
}

static PyMemberDef traced_members[] = {
	{"__vectorcalloffset__", T_PYSSIZET, offsetof(TracedObject, vectorcall), READONLY, NULL},
	{"span_name", T_OBJECT, offsetof(TracedObject, name), READONLY, "the span's name"},
	{NULL, 0, 0, 0, NULL},
};

static PyGetSetDef traced_getset[] = {
	{"__dict__", PyObject_GenericGetDict, PyObject_GenericSetDict, NULL, NULL},
	{NULL, NULL, NULL, NULL, NULL},
};

static PyTypeObject TracedType = {
	PyVarObject_HEAD_INIT(NULL, 0).tp_name = "spanwatch._spanwatch.Traced",
	.tp_basicsize = sizeof(TracedObject),
	.tp_dealloc = (destructor)traced_dealloc,
	.tp_vectorcall_offset = offsetof(TracedObject, vectorcall),
	.tp_call = PyVectorcall_Call,
	.tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL | Py_TPFLAGS_METHOD_DESCRIPTOR,
	.tp_doc = "Traced(fn, name, start=True): fn timed as a span named name on each call.",
	.tp_traverse = (traverseproc)traced_traverse,
	.tp_clear = (inquiry)traced_clear,
	.tp_members = traced_members,
	.tp_getset = traced_getset,
	.tp_descr_get = traced_get,
	.tp_dictoffset = offsetof(TracedObject, dict),
	.tp_new = traced_new,
};

/* ---- module functions -------------------------------------------------- */

static PyObject *mod_listening(PyObject *m, PyObject *unused)
{
	(void)m, (void)unused;
	return PyBool_FromLong(spanwatch_listening());
}

static PyObject *mod_mode(PyObject *m, PyObject *unused)
{
	(void)m, (void)unused;
	switch (sw.mode) {
	case SPANWATCH_MODE_USER_EVENTS:
		return PyUnicode_FromString("user_events");
	case SPANWATCH_MODE_MARKER:
		return PyUnicode_FromString("marker");
	}
	return PyUnicode_FromString("off");
}

static PyObject *mod_error(PyObject *m, PyObject *unused)
{
	(void)m, (void)unused;
	return PyLong_FromLong(sw.error);
}

/* record(name, duration_ns, start_ns=0, error=False, trace_id=None, span_id=None) */
static PyObject *mod_record(PyObject *m, PyObject *args, PyObject *kw)
{
	static char *kwlist[] = {"name", "duration_ns", "start_ns", "error", "trace_id", "span_id", NULL};
	PyObject *name, *trace = NULL, *spanid = NULL;
	unsigned long long dur, start = 0;
	int error = 0;
	struct spanwatch_event ev;
	const char *n;
	Py_ssize_t len;
	char ht = 0, hs = 0;

	(void)m;
	if (!PyArg_ParseTupleAndKeywords(args, kw, "UK|KpOO", kwlist, &name, &dur, &start, &error, &trace, &spanid))
		return NULL;
	memset(&ev, 0, sizeof(ev));
	if (ids(trace, ev.trace_id, 16, "trace_id", &ht) < 0 || ids(spanid, ev.span_id, 8, "span_id", &hs) < 0)
		return NULL;
	if (!spanwatch_listening())
		Py_RETURN_NONE;
	if ((n = name_utf8(name, &len)) == NULL)
		return NULL;
	ev.duration_ns = dur;
	ev.start_ns = start;
	ev.status = error ? SPANWATCH_STATUS_ERROR : SPANWATCH_STATUS_OK;
	spanwatch_fill_name_(&ev, n, (size_t)len);
	emit(&ev, NULL);
	Py_RETURN_NONE;
}

/* _skip(filename): frames of this file are the SDK's own. */
static PyObject *mod_skip(PyObject *m, PyObject *filename)
{
	(void)m;
	if (fr.skip == NULL && (fr.skip = PySet_New(NULL)) == NULL)
		return NULL;
	if (PySet_Add(fr.skip, filename) < 0)
		return NULL;
	Py_RETURN_NONE;
}

/* _frames(): whether Python frames are put in stacks (-1 off, 0 not yet
 * set up, 1 on), and how many trampolines were made. */
static PyObject *mod_frames(PyObject *m, PyObject *unused)
{
	(void)m, (void)unused;
	return Py_BuildValue("(ii)", fr.state, fr.count);
}

static PyMethodDef mod_methods[] = {
	{"span", (PyCFunction)(void (*)(void))mod_span, METH_FASTCALL | METH_KEYWORDS,
	 "span(name, *, trace_id=None, span_id=None, start=True): a context manager timing its block."},
	{"listening", mod_listening, METH_NOARGS, "listening(): whether an agent listens now."},
	{"mode", mod_mode, METH_NOARGS, "mode(): how spans leave: 'user_events', 'marker' or 'off'."},
	{"error", mod_error, METH_NOARGS, "error(): the errno of the failed user_events registration, 0 if none."},
	{"record", (PyCFunction)(void (*)(void))mod_record, METH_VARARGS | METH_KEYWORDS,
	 "record(name, duration_ns, start_ns=0, error=False, trace_id=None, span_id=None): a finished span."},
	{"_skip", mod_skip, METH_O, NULL},
	{"_frames", mod_frames, METH_NOARGS, NULL},
	{NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
	PyModuleDef_HEAD_INIT, "spanwatch._spanwatch", "The native part of the spanwatch Python SDK.", -1, mod_methods,
	NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__spanwatch(void)
{
	PyObject *m;

	if (PyType_Ready(&SpanType) < 0 || PyType_Ready(&TracedType) < 0)
		return NULL;
	m = PyModule_Create(&module);
	if (m == NULL)
		return NULL;
	noop_span = PyObject_New(SpanObject, &SpanType);
	if (noop_span == NULL)
		return NULL;
	noop_span->name = PyUnicode_FromString("");
	noop_span->code = NULL;
	noop_span->mono = 0;
	noop_span->noop = 1;
	if (PyModule_AddObjectRef(m, "Span", (PyObject *)&SpanType) < 0 ||
	    PyModule_AddObjectRef(m, "Traced", (PyObject *)&TracedType) < 0)
		return NULL;
	spanwatch_open(&sw);
	return m;
}
