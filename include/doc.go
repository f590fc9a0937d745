// Package include holds spanwatch.h, the header-only C SDK (user_events,
// else the marker the agent uprobes) that libspanwatch (sdk/c) and the
// other languages' SDKs are built from, and its tests: the C test program
// in test/ (which compiles libspanwatch's source into itself) is built
// with gcc, clang and g++, its struct and probe layouts are checked against
// bpf/span_event.h and internal/markerabi at compile time, its format
// string against the Go SDK's, its payload bytes against the layout, its
// fallback to the marker where the kernel has no user_events, and, in the
// user_events VM (test/vm), spans from the header and from libspanwatch's C
// ABI through the kernel to a collector.
package include
