// Package emit is the span SDK applications import: it records spans
// (name, duration, status, trace and span ids) for spanwatch, and tells it
// when a span starts, so that a span running past its budget is sampled
// while it runs (where its time goes; a span that never ends is reported)
// on whatever thread its goroutine runs.
//
//	sp := emit.Start("checkout")
//	defer func() { sp.End(err) }()
//
// A span is handed to the kernel in one of two ways, chosen once per process:
//
//   - user_events (Linux 6.4+ with CONFIG_USER_EVENTS): one writev of the
//     payload to the spanwatch_span event. No trap, no context switch.
//   - the marker: a call to an assembly function whose first instruction is
//     a nop, which spanwatch uprobes. Used where user_events is missing.
//     The marker is built for amd64 and arm64; on other architectures it
//     is an empty Go function that no collector attaches to.
//
// While no spanwatch collector listens, starting and ending a span cost one
// load and a branch each: the kernel sets the enable word when a collector
// attaches (the user_events enable bit, or the uprobe's reference counter).
// While one listens, Start sends a start event (duration 0, SPAN_F_START)
// and End the span, both with the goroutine's g pointer as exec_id.
//
// Set SPANWATCH_EMIT=marker or SPANWATCH_EMIT=user_events to force a mode,
// or SPANWATCH_EMIT=off to disable emission.
package emit
