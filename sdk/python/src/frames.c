// SPDX-License-Identifier: (Apache-2.0 OR BSD-2-Clause)
/*
 * The code objects of the calling thread's Python frames, innermost first.
 *
 * CPython 3.11 keeps a thread's frames as a chain of _PyInterpreterFrame
 * (tstate->cframe->current_frame, then ->previous), the chain py-spy and
 * the OpenTelemetry eBPF profiler read from outside the process; here it
 * is read from inside, with the GIL held, without creating frame objects.
 * Its layout is internal (Py_BUILD_CORE), so this file is compiled apart
 * and only for 3.11; other versions take the public API (PyEval_GetFrame,
 * PyFrame_GetBack), which materializes frame objects as it goes.
 */
#include <Python.h>

#if PY_VERSION_HEX >= 0x030B0000 && PY_VERSION_HEX < 0x030C0000
#define Py_BUILD_CORE 1
#include "internal/pycore_frame.h"

int spanwatch_py_codes(PyObject **out, int max)
{
	PyThreadState *ts = PyThreadState_Get();
	_PyInterpreterFrame *f = ts->cframe ? ts->cframe->current_frame : NULL;
	int n = 0;

	for (; f != NULL && n < max; f = f->previous) {
		/* A frame being set up has not run its first instruction. */
		if (_PyFrame_IsIncomplete(f))
			continue;
		out[n++] = (PyObject *)f->f_code;
	}
	return n;
}
#else
int spanwatch_py_codes(PyObject **out, int max)
{
	PyFrameObject *f = PyEval_GetFrame(); /* borrowed */
	int n = 0;

	Py_XINCREF(f);
	while (f != NULL && n < max) {
		PyCodeObject *code = PyFrame_GetCode(f);
		PyFrameObject *back = PyFrame_GetBack(f);

		/* The frame holds its code; the caller uses it while the
		 * frames are still on the stack. */
		out[n++] = (PyObject *)code;
		Py_DECREF(code);
		Py_DECREF(f);
		f = back;
	}
	Py_XDECREF(f);
	return n;
}
#endif
