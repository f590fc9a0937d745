// Package node holds the tests of the Node.js SDK in this directory
// (index.js, otel.js with the OpenTelemetry SpanProcessor, and src/addon.c,
// an N-API addon built from include/spanwatch.h): they build the addon
// with gcc against Node.js's headers, install @opentelemetry/sdk-trace-base
// from npm (testdata/package-lock.json) into a temporary directory, run a
// service instrumented with OpenTelemetry JS under a real collector with
// perf maps on, and check exact counts, errors and budgets, and that the
// stack of each slow span starts at the JavaScript function that ended it.
// They skip, saying why, where node, npm, Node.js's headers, the npm
// registry, root or BPF are missing.
package node
