// Package loopbench holds what the benchmarks that time a traced loop
// against a bare one share (bench/usdt, bench/funcs): copies of the loop
// as separate files, one run's time per iteration as the loop prints it,
// the BPF programs' run time from the kernel's statistics, the programs a
// process holds, and the median.
package loopbench
