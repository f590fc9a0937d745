"""Spans for the spanwatch agent.

    import spanwatch

    with spanwatch.span("checkout"):
        ...                              # timed; an exception marks it failed

    @spanwatch.traced("payment.charge")  # or @spanwatch.traced: the function's qualified name
    def charge(card): ...

    spanwatch.record("import", duration_ns, error=False)   # a span timed elsewhere

While no agent listens, span() returns a shared no-op and a traced function
calls the function it wraps: one load and a branch in C. Spans reach the
agent through Linux user_events where the kernel has them and the process
may register them, else through a marker function the agent uprobes
(mode() says which). Stacks of slow spans show the Python functions of the
thread that ended the span (see the package's README).

Coroutines: a traced `async def` is timed from the call to the end of its
await, without a start event (an event loop thread runs many spans at
once, so the agent does not sample it for one of them); use
`span(name, start=False)` around awaits for the same reason.
"""

import functools
import inspect
import time

from . import _spanwatch

__all__ = ["span", "traced", "record", "listening", "mode"]

span = _spanwatch.span
record = _spanwatch.record
listening = _spanwatch.listening
mode = _spanwatch.mode

# This file's frames (the coroutine wrapper) are the SDK's own: left out of
# stacks.
_spanwatch._skip(__file__)


def traced(name=None, *, start=True):
    """Decorate a function so that each call is a span.

    The span is named name, or the function's qualified name. A call that
    raises is a failed span. @traced and @traced() both work.
    """
    if callable(name):
        return traced(None, start=start)(name)

    def decorate(fn):
        span_name = name or getattr(fn, "__qualname__", None) or repr(fn)
        if inspect.iscoroutinefunction(fn):
            return _traced_coroutine(fn, span_name)
        t = _spanwatch.Traced(fn, span_name, start)
        functools.update_wrapper(t, fn)
        return t

    return decorate


def _traced_coroutine(fn, span_name):
    @functools.wraps(fn)
    async def wrapper(*args, **kwargs):
        if not _spanwatch.listening():
            return await fn(*args, **kwargs)
        start_ns = time.time_ns()
        t0 = time.monotonic_ns()
        failed = False
        try:
            return await fn(*args, **kwargs)
        except BaseException:
            failed = True
            raise
        finally:
            _spanwatch.record(span_name, time.monotonic_ns() - t0, start_ns, failed)

    return wrapper
