// Package policy reads spanwatch's rule file: span budgets, threshold and
// anomaly rules written in YAML, and Rego policies evaluated with OPA.
//
// The rules are sections of spanwatch's one configuration file, which
// package config owns: it splits the file's top level once and hands
// policy's sections (budgets:, rules:, policies:, external_labels:,
// policy_limits:) to Sections, one decoder per section, which decodes them
// strictly (unknown keys, wrong types, bad durations and duplicate names
// are errors reported as "file:line:col: message", a config/section.Error)
// and compiles every template, glob and Rego module once, so evaluating a
// rule is cheap and cannot fail on syntax. Config is the result: policy
// never sees the other sections. Parse and LoadFile decode policy's
// sections of a file alone, for tests and tools that need only the rules.
// The format is documented by the JSON Schema in config/schema.json.
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
