// Package deploy holds no code: it holds spanwatch's deployment files (a
// Kubernetes DaemonSet in kubernetes/, a systemd unit in systemd/, the
// image script beside the repository's Dockerfile, Prometheus rules in
// prometheus/ and a Grafana dashboard in grafana/) and the tests that keep
// them valid: the manifest decoded strictly into Kubernetes API types and
// its privileges checked, its rule file parsed by spanwatch's own parser,
// the unit checked by systemd-analyze, both run against the real binary's
// flags and the capabilities they grant; the rules checked and unit-tested
// by promtool and evaluated by a real Prometheus; every metric the
// dashboard and the rules query found on a real agent's /metrics; the
// image's binary built static and stamped, and the image built and run
// where a Docker daemon runs.
package deploy
