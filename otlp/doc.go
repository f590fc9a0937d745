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
// Stacks as profiles (OTLP profiles, or pprof to Pyroscope) are not sent:
// `spanwatch stacks --format pprof` writes the same stacks as a profile
// from a recording.
package otlp
