// Package tpsource describes span sources on user_events tracepoints, as
// the sources: section of a rule file declares them (DecodeSources, which
// package config calls for the user_events: and eventheader: lists):
//
//   - user_events: any user_event registered by any process, its payload
//     cast by the field offsets of the kernel's own format file (no header
//     shared with the program, no compiler at run time). A span is one
//     event carrying its duration in a field, or a start event and an end
//     event paired by thread or by a key field.
//   - eventheader: the EventHeader tracepoints of a provider
//     (PROVIDER_L<level>K<keyword>), as the OpenTelemetry user_events
//     exporters write them. Their Span events become spans with no
//     mapping at all; other events map fields by name (struct paths such
//     as PartB.route) with the same vocabulary as user_events.
//
// Both map fields with the vocabulary of USDT sources (internal/usdt): a
// fixed span name or a name field, a duration field or a start/end pair,
// a status field. The tracepoint source (source/tracepoint.Attach)
// resolves the fields against each event's format when the event appears,
// and writes what the BPF programs need.
package tpsource
