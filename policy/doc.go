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
// (http.send, net.*, opa.runtime) are refused when the policy is loaded, and
// each evaluation runs under a time limit.
package policy
