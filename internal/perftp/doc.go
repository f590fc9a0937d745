// Package perftp attaches the span sources' BPF programs to
// perf_tp_event, the function every tracepoint's perf events go through,
// and keeps a counting perf event open on every online CPU for each
// tracepoint they read (a Set), across CPU hotplug: without one, a CPU's
// user_events writes reach no BPF program. The collector's own span event
// and the tracepoint sources (source/tracepoint) share it.
package perftp
