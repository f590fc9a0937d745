// Package eventheader reads EventHeader events: the self-describing
// user_events format of Microsoft's LinuxTracepoints (eventheader.h), which
// the OpenTelemetry user_events exporters (Rust's
// opentelemetry-user-events-trace, the .NET Geneva exporter's logs) write.
//
// An EventHeader tracepoint is a user_event named
// PROVIDER_L<level>K<keyword>[options] whose kernel format is always the
// same six header fields (CommandTypes); the payload is an 8-byte header,
// extension blocks (event metadata, activity ids), then the field values.
// The metadata names the event and each field, with its encoding (how big
// the value is), format (how to show it) and struct nesting, so a reader
// finds fields by name ("PartB.name") rather than by offset.
//
// spanwatch decodes these events in BPF (bpf/eventheader.bpf.c). This
// package holds the definitions the Go side needs (tracepoint names, the
// field path hash both sides compute) and a reference decoder that walks an
// event exactly as the BPF decoder does, with the same limits and the same
// reasons for refusing an event, so tests can hold the two against each
// other. RFC 3339 times are parsed by ParseRFC3339, which the BPF parser
// mirrors.
package eventheader
