// Package metrics exports what spanwatch sees to Prometheus: per span and
// workload (namespace, pod, container, process, unit, cgroup, and a
// source's labels), counters of spans, errors and over-budget spans, and a
// latency histogram; plus spanwatch's own health (events, every kind of
// lost data, read and evaluation durations, rule errors, build info).
//
// The latency histogram is exported in both of Prometheus' forms, in one
// metric family. To a scraper that negotiates protobuf it is a native
// histogram of schema 6: exactly spanwatch's own buckets
// (snapshot.HistSchema), so histogram_quantile agrees with spanwatch's
// quantiles to within a bucket (1.09%), and Prometheus stores one series
// for it. To every scraper it also carries classic buckets, whose le
// bounds are bucket boundaries of the same scheme (SnapBound moves a
// configured bound to the nearest one, by at most 0.55%), so every classic
// count is exact too. Each span series' histogram carries one exemplar,
// the trace and span ids of its newest overrun with a trace id
// (exemplar.go), where client_golang would put it. Config (or the rule
// file's metrics: section, Decode) chooses the classic bounds, turns the
// native form or the exemplars off, and sets how long a series that
// stopped appearing stays.
//
// Config.Names = NamesSpanmetrics exports the calls and the durations
// under the names the OpenTelemetry Collector's spanmetrics connector's
// metrics take in Prometheus (traces_span_metrics_calls_total, split by
// status_code into STATUS_CODE_ERROR and STATUS_CODE_UNSET, and
// traces_span_metrics_duration_seconds), with the span labelled span_name
// and service_name the OpenTelemetry service name declared by the cgroup's
// processes (by the span's own process where a cgroup runs several
// executables, whose series are kept per process) in their environment (OTEL_SERVICE_NAME, or service.name in
// OTEL_RESOURCE_ATTRIBUTES, as the SDKs read them; the default names
// label it service) or else their executable's name, so dashboards and
// rules written for the connector work. What they cannot have: span_kind
// (a span event does not carry one), a duration histogram per status
// code (spanwatch keeps one histogram a series), and a service name a
// program gives its SDK in code (a span event does not carry it).
//
// Snapshots are deltas over a window; the Exporter adds them up, so its
// counters and histograms are cumulative, as Prometheus expects. Each
// Observe publishes an immutable view of every series (about 100 bytes a
// series, the cumulative histograms packed at 2-4 bytes a bucket), and a
// scrape writes the span families straight from the newest view, in the
// negotiated format, through a 64 KiB buffer: it takes no lock and keeps
// nothing per series, whatever their number (expose.go), and its output
// is what expfmt would write for the same families. Other packages
// register their own collectors in Registry; they are encoded by expfmt
// before the span families.
//
// The endpoint binds to DefaultAddr (127.0.0.1:9464, loopback only) unless
// told otherwise: span names and cgroup paths say what runs on the host, so
// exposing them beyond the host is the operator's decision.
package metrics
