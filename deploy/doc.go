// Package deploy holds no code: it holds spanwatch's deployment files (a
// Helm chart in helm/spanwatch and its standalone rendering, the
// Kubernetes manifest in kubernetes/; a systemd unit in systemd/; the
// release script and its image builder, image/; Prometheus rules in
// prometheus/ and a Grafana dashboard in grafana/) and the tests that keep
// them valid: the chart linted and rendered by the real helm, every
// rendering decoded strictly into the Kubernetes and prometheus-operator
// API types and validated by kubectl-validate against Kubernetes' OpenAPI
// schemas, the manifest equal to the chart's rendering, its privileges
// checked, its rule file parsed by spanwatch's own parser; the unit
// checked by systemd-analyze; both run against the real binary's flags
// and the capabilities they grant; the rules checked and unit-tested by
// promtool and evaluated by a real Prometheus; every metric the dashboard
// and the rules query found on a real agent's /metrics; the versions they
// name equal to buildinfo.Release; the release's binaries built static,
// stamped and of their platform's machine, and its image run under runc.
package deploy
