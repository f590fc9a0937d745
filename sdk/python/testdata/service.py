"""A Python service timed with spanwatch, for sdk/python's tests.

    service.py N NAME

waits (up to 30 s) for an agent to listen, warms up, then serves N
requests twice:
handle_checkout times a `with spanwatch.span(NAME + ".with")` block,
process_payment is `@spanwatch.traced(NAME + ".traced")`. Every 10th
request raises (a failed span), one in ten spends 150 ms in charge_card, the
others return at once. Prints "mode=M" first, then at the end "slow
SERIES K" for each series, K the requests it measured itself (around the
span) at 100 ms or more (on a loaded machine a request that does nothing
can wait that long for a CPU), and "done".
"""

import sys
import time

import spanwatch


def charge_card(slow):
    if slow:
        time.sleep(0.15)


def handle_checkout(name, i):
    with spanwatch.span(name):
        charge_card(i % 10 == 5)
        if i % 10 == 0:
            raise ValueError("card declined")


def make_payment(name):
    @spanwatch.traced(name)
    def process_payment(i):
        charge_card(i % 10 == 5)
        if i % 10 == 0:
            raise ValueError("card declined")

    return process_payment


def main():
    n, name = int(sys.argv[1]), sys.argv[2]
    process_payment = make_payment(name + ".traced")
    print("mode=" + spanwatch.mode(), flush=True)
    deadline = time.monotonic() + 30
    while not spanwatch.listening() and time.monotonic() < deadline:
        time.sleep(0.01)
    # Each Python function gets its trampoline, and its perf map line, the
    # first time a span ends in it; the agent reads a process's perf map
    # again after a miss at most once a second. Warm up, then let a second
    # pass, so that the first slow span's stack is named too.
    warm = make_payment(name + ".warm")
    for i in (1, 2, 3):
        handle_checkout(name + ".warm", i)
        warm(i)
    time.sleep(1.1)
    slow = {name + ".with": 0, name + ".traced": 0}
    for i in range(n):
        t0 = time.monotonic_ns()
        try:
            handle_checkout(name + ".with", i)
        except ValueError:
            pass
        t1 = time.monotonic_ns()
        try:
            process_payment(i)
        except ValueError:
            pass
        t2 = time.monotonic_ns()
        slow[name + ".with"] += t1 - t0 >= 100_000_000
        slow[name + ".traced"] += t2 - t1 >= 100_000_000
    for series, k in slow.items():
        print("slow %s %d" % (series, k))
    print("done", flush=True)


if __name__ == "__main__":
    main()
