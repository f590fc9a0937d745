// Package include holds spanwatch.h, the header-only C emitter, and its
// tests: the C test program in test/ is built with gcc, clang and g++, its
// struct layout is checked against bpf/span_event.h at compile time, its
// format string against the Go SDK's, its payload bytes against the layout,
// and its fallback where the kernel has no user_events.
package include
