// Package metrics exports what spanwatch sees to Prometheus: per span and
// cgroup, counters of spans, errors and over-budget spans, and a latency
// histogram whose bucket bounds are the exact bounds of spanwatch's own
// log-linear histogram (snapshot.BucketBounds), so every exported bucket
// count is exact; plus spanwatch's own health (events, drops, read and
// evaluation durations, rule errors).
//
// Snapshots are deltas over a window; the Exporter adds them up, so its
// counters and histograms are cumulative, as Prometheus expects. Other
// packages register their own collectors in Registry.
//
// The endpoint binds to DefaultAddr (127.0.0.1:9464, loopback only) unless
// told otherwise: span names and cgroup paths say what runs on the host, so
// exposing them beyond the host is the operator's decision.
package metrics
