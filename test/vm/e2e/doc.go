// Package e2e holds spanwatch's end-to-end tests of the user_events path:
// the span SDK (emit) writing user_events in one or more processes, and the
// collector's BPF program on perf_tp_event aggregating them.
//
// They need a kernel with user_events (6.4+, CONFIG_USER_EVENTS=y), BTF and
// fentry trampolines, and root. The machines that build spanwatch lack
// user_events, so test/vm/run.sh runs these tests in a VM with such a kernel
// (test/vm/kernel.sh); elsewhere they skip, and inside the VM
// (SPANWATCH_IN_VM=1) a missing feature fails them instead.
package e2e
