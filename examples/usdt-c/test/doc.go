// Package usdtc holds no Go code, only the tests of the usdt-c example: the
// example is ../server.c, a C program with USDT probes, and
// ../spanwatch.yaml, the configuration that turns its probes into spans. The tests build it with its Makefile, run it, validate the
// configuration against the probes the binary really has, and, as root,
// run it under a real collector.
package usdtc
