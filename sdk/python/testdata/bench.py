"""The per-span cost of the Python SDK, for sdk/python's benchmark.

    bench.py N

times N iterations of an empty function call, of a `with spanwatch.span()`
block, and of a call of a @spanwatch.traced function (and of the same
function undecorated), and prints nanoseconds per iteration: "empty",
"span", "traced", "plain", then "listening 0|1". With
SPANWATCH_BENCH_WAIT=1 it first waits (up to 30 s) for an agent.
"""

import os
import sys
import time

import spanwatch


def empty():
    pass


def plain(x):
    return x


traced = spanwatch.traced("bench.py.traced")(plain)


def timed(fn, n):
    t0 = time.perf_counter_ns()
    fn(n)
    return (time.perf_counter_ns() - t0) / n


def loop_empty(n):
    for _ in range(n):
        empty()


def loop_span(n):
    span = spanwatch.span
    for _ in range(n):
        with span("bench.py"):
            pass


def loop_traced(n):
    for i in range(n):
        traced(i)


def loop_plain(n):
    for i in range(n):
        plain(i)


def main():
    n = int(sys.argv[1])
    if os.environ.get("SPANWATCH_BENCH_WAIT") == "1":
        deadline = time.monotonic() + 30
        while not spanwatch.listening() and time.monotonic() < deadline:
            time.sleep(0.01)
    print("empty %.2f" % timed(loop_empty, n))
    print("span %.2f" % timed(loop_span, n))
    print("traced %.2f" % timed(loop_traced, n))
    print("plain %.2f" % timed(loop_plain, n))
    print("listening %d" % spanwatch.listening())


if __name__ == "__main__":
    main()
