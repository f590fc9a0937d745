// Package deploy holds no code: it holds spanwatch's deployment files (a
// Kubernetes DaemonSet in kubernetes/, a systemd unit in systemd/) and the
// tests that keep them valid: the manifest decoded strictly into Kubernetes
// API types and its privileges checked, its rule file parsed by spanwatch's
// own parser, the unit checked by systemd-analyze, and both run against the
// real binary's flags and the capabilities they grant.
package deploy
