// Package vmtest tests USDT sources on the kernel it runs on, built to run
// in the test VM (test/vm/matrix.sh, every kernel of the matrix) as well
// as on the host: names on absent pages read by the kernel's own means
// (sleepable programs with the bpf_copy_from_user_str kfunc on 6.12+,
// bpf_copy_from_user from 6.0), or by the tracer through /proc/PID/mem.
package vmtest
