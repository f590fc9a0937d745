"""A Python service timed with spanwatch, for sdk/python's tests.

    service.py N NAME

waits (up to 30 s) for an agent to listen, warms up, then serves N
requests twice:
handle_checkout times a `with spanwatch.span(NAME + ".with")` block,
process_payment is `@spanwatch.traced(NAME + ".traced")`. Every 10th
request raises (a failed span), every 5th spends 25 ms in charge_card, the
others 1 ms. Prints "mode=M" first and "done" at the end.
"""

import sys
import time

import spanwatch


def charge_card(slow):
    time.sleep(0.025 if slow else 0.001)


def handle_checkout(name, i):
    with spanwatch.span(name):
        charge_card(i % 5 == 0)
        if i % 10 == 0:
            raise ValueError("card declined")


def make_payment(name):
    @spanwatch.traced(name)
    def process_payment(i):
        charge_card(i % 5 == 0)
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
    for i in range(n):
        try:
            handle_checkout(name + ".with", i)
        except ValueError:
            pass
        try:
            process_payment(i)
        except ValueError:
            pass
    print("done", flush=True)


if __name__ == "__main__":
    main()
