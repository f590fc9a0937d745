// Package policy reads spanwatch's rule file: span budgets, threshold and
// anomaly rules written in YAML, and Rego policies evaluated with OPA.
//
// A rule file is one YAML document; Parse and LoadFile decode it strictly
// (unknown keys, wrong types, bad durations and duplicate names are errors
// reported as "file:line:col: message") and compile every template, glob and
// Rego module once, so evaluating a rule is cheap and cannot fail on syntax.
// The format is documented by the JSON Schema in schema.json (see Schema).
//
// The sections that belong to other parts of spanwatch (webhooks and routing
// for delivery, sources and collector for the collector) are kept as raw
// yaml.Node values for those packages to decode.
//
// Rego policies run in a sandbox: builtins that reach outside the agent
// (http.send, net.*, opa.runtime), and graph.reachable_paths, are refused
// when the policy is loaded, and each evaluation runs under a time limit
// and a memory bound (policy_limits:, Limits). The bound holds two ways:
// builtins that can allocate far more in one call than their operands hold
// refuse a call that would pass it, before it runs (guard.go:
// WithMemoryLimit carries the bound), and WatchHeap cancels evaluations
// that grow the Go heap past it a step at a time (heap.go). Either way
// Policy.Eval returns an error wrapping ErrMemory.
package policy
