// Package otlp sends overrun records (spans slower than their budget,
// with the stack of the thread that ran them) to an OpenTelemetry
// Collector, or any OTLP/HTTP endpoint, as OTLP log records: one record an
// overrun, event name spanwatch.overrun, severity WARN, with the span's
// trace and span ids (so a tracing backend links the record to its
// trace), a body holding the summary and the stack (profile.StackText:
// where the in-span samples were, then the end stack), and attributes
// named as OpenTelemetry's semantic conventions name them where they have
// a name (process.pid, thread.id, process.executable.name,
// k8s.namespace.name, k8s.pod.name, k8s.container.name, container.id) and
// spanwatch.* otherwise (span name, duration, budget, cgroup, unit,
// source labels).
//
// The requests are OTLP/HTTP with JSON bodies (POST ENDPOINT/v1/logs,
// Content-Type application/json), written here rather than with the
// OpenTelemetry SDK's exporter, which links gRPC into the agent for a
// few hundred lines of encoding. An Exporter never blocks the agent: a
// bounded queue, batches of up to 512 records a second, retries with
// backoff on 429, 502, 503, 504 and connection errors, and counts of what
// it dropped, gave up on, or the endpoint refused (Stats).
//
// With profiles: true, each batch goes also as one OTLP profile (the
// experimental profiles signal, opentelemetry.proto.profiles.v1development,
// development version 1, as the OpenTelemetry Collector's OTLP receiver
// v0.165.0 decodes it): POST ENDPOINT/v1development/profiles, Content-Type
// application/x-protobuf, header otlp-profiles-development-version: 1. The
// request holds the batch's resource, scope spanwatch, one profile of
// sample type spans/count, and one sample an overrun: value 1, the
// overrun's time, its stack (the frames it ended on, kernel frames above
// user frames, leaf first), the log record's attributes, and a link to
// its trace and span (the dictionary's link table). The span's duration
// is an attribute (spanwatch.duration_ns), not the value: the end stack
// did not take the whole span, so weighing it by the duration would blame
// it for time spent elsewhere (the in-span samples are not sent as
// profiles yet). The dictionary holds each string, function, location,
// stack, link and attribute once. The protobuf is written here with
// protowire, field by field: the schema changes between development
// versions, and the receiver refuses a version it does not know rather
// than misread it. Profiles share the records' queue, batches, retries
// and stop; their counts are Stats.ProfileSamples.
//
// Pyroscope's pprof ingest API is not used: `spanwatch stacks --format
// pprof` writes the stacks of a recording as a pprof profile.
package otlp
