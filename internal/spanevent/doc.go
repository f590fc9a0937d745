// Package spanevent holds the sizes of the span event (struct span_event in
// bpf/span_event.h) that the span SDK (emit, emit/otel) and the agent
// (snapshot, collector) must agree on. It imports nothing, so that the SDK
// every instrumented application links stays light: emit takes its
// constants from here rather than from snapshot, which would bring
// encoding/json, math/big and the snapshot schema into every application.
// emit/layout_test.go checks them against the C header.
package spanevent
