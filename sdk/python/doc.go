// Package python holds the tests of the Python SDK in this directory
// (spanwatch/, the package; src/, its native extension built from
// include/spanwatch.h; setup.py): they build the extension for Debian's
// CPython 3.11 (/usr/bin/python3.11, python3.11-dev) with setup.py, run a
// Python service under a real collector, and check exact counts, errors
// and budgets, and that the stack of each slow span starts at the Python
// function that ended it (through the extension's trampolines and perf
// map). They skip, saying why, where that Python, its headers, root or BPF
// are missing.
package python
