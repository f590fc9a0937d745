// Package libspanwatch holds the tests of libspanwatch, the C library in
// this directory (spanwatch.c, libspanwatch.h, built by its Makefile from
// include/spanwatch.h): a C service built as projects build it — the
// header alone with gcc's default flags, the shared library, the static
// library — sends spans to a real collector through the marker (or
// user_events where the kernel has them); the tests check exact counts,
// errors and budgets, and that the stack of each slow span starts at the C
// function that ended it.
package libspanwatch
