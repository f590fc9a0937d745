// Package vmtest tests USDT sources on the kernel it runs on, built to run
// in the test VM (test/vm/run-all.sh, a 6.12 kernel) as well as on the
// host: names on absent pages read by the kernel's own means (sleepable
// programs with the bpf_copy_from_user_str kfunc on 6.12+).
package vmtest
