// Package userevents allows Go programs to emit Linux user_events: register an
// event described by a format string, check cheaply whether any tracer is
// attached, and write payloads that tracers (perf, ftrace, eBPF through
// perf_tp_event) receive.
//
// It needs kernel 6.4+ built with CONFIG_USER_EVENTS=y and write access to
// <tracefs>/user_events_data (root, or a tracefs mounted or chmod'ed to grant
// it). On other kernels Register returns an error wrapping ErrNotSupported, so
// callers can fall back to another mechanism. Documentation of the kernel
// interface: Documentation/trace/user_events.rst.
//
// A process shares one user_events_data file descriptor between all its
// events, and the kernel's enable bits live on pages mapped with mmap, never
// on the Go heap, because the kernel writes them behind the Go runtime's back.
// Enabled is one atomic load, cheap enough to guard every write.
//
// On current kernels (seen on 6.12) an event is deleted automatically once
// nothing references it: no process has it registered and no tracer has it
// enabled. A collector that wants a stable event id registers the event
// itself and keeps it open.
//
// The kernel ties a process's registrations to the thread that made them, so
// the package makes every registration and unregistration from one thread
// of its own that never exits.
package userevents
