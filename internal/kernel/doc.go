// Package kernel finds out what the running kernel offers spanwatch's BPF
// programs and what each of spanwatch's features gets from it.
//
// Probe tests the kernel once per process: cilium/ebpf's feature probes
// (map and program types, helpers, link types) and small load tests of
// its own (BPF atomics, sleepable uprobes, queue maps in sleepable
// programs, fentry on perf_tp_event), plus the kernel's BTF (kfuncs,
// helpers) and its user_events. A probe's answer is yes, no (the kernel
// refused: ebpf.ErrNotSupported, or EINVAL from a load test), or
// unknown (the probe itself failed, as without CAP_BPF).
//
// Facts gather those answers and what the loaders chose (the core's
// objects, how USDT sites are told apart and how names are read, how
// uprobes and user_events attach); Rows turns them into the table of
// spanwatch's features, each one working, replaced by something else (and
// what), or declined (and why), with the test that shows it on a kernel
// of the matrix (test/vm/matrix.sh). The agent logs the table as one line
// at start, and `spanwatch kernel` prints it.
//
// Each Feature states the mainline release that brought it: tests that
// need one fail, rather than skip, on a kernel that should have it
// (internal/bpftest.Require), as cilium/ebpf's own tests do.
package kernel
