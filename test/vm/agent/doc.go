// Package agent holds the end-to-end tests of the spanwatch binary on the
// kernel it runs on, for the kernel matrix (test/vm/matrix.sh): the demo
// (spans from the Go SDK through the marker or user_events, a budget, an
// alert with the stack), a third-party C program with USDT probes built
// with gcc's default flags (pairs by a key and named by a string argument,
// a single probe with a duration, a budget whose overruns carry a stack
// reaching main), and `spanwatch kernel`, whose report the matrix turns
// into docs/kernels.md.
//
// On the host they build the binary with go build; in the VM they run
// the one test/vm/run.sh built ($SPANWATCH_BIN).
package agent
