// Package agent is spanwatch's agent: the loop that, every interval, takes
// a snapshot of what the kernel aggregated (package collector), evaluates
// the rules and policies over it (package detector) and delivers the
// alerts (package notify), with the wiring around it: the budgets pushed
// into BPF, the USDT sources and their in-flight watcher, the output file,
// the HTTP listener, and reloading.
//
// Load reads a configuration file and validates every section the agent
// reads, the way the agent runs it but without BPF: spanwatch check is Load,
// and spanwatch run is Load, then New and Run. A file that Load accepts
// fails later only for reasons of the running system (a kernel that
// refuses a program, a binary with no marker).
//
// The configuration is reloaded when its files change (polled every
// second, independently of the snapshot interval) and on SIGHUP. A file
// that does not load keeps the whole running configuration; the failure
// is logged and counted. A file that loads applies live: rules, policies,
// budgets, webhooks and routing, external_url and collector.interval (the
// ticker is reset). Settings that shape the BPF objects or what is
// attached (the other collector: keys, the USDT sources, the outbox's
// path, webhooks where none ran) keep their running values: each is logged
// as an error saying a restart applies it, counted in
// spanwatch_config_restart_pending and listed by GET /api/status, while
// the rest of the file applies.
//
// When Run's context ends (SIGTERM, SIGINT), the agent takes a final
// snapshot, so the spans counted since the previous one are not lost,
// evaluates it, writes its alerts to the outbox, syncs the output file,
// and returns.
//
// Alerts carry a generatorURL: the configured external URL (the
// listener's address as seen from outside: top-level external_url:, or
// --external-url) followed by /snapshot?span=NAME&cgroup_id=ID, which the
// listener answers with that series from the newest snapshot.
//
// The listener (listener.go) is served by exporter-toolkit, with TLS and
// basic authentication from a Prometheus web configuration file
// (ListenerSettings.WebConfigFile). /metrics, /-/healthy and /-/ready go
// to every client the web configuration admits; /snapshot and /api/* only
// to an authenticated one: a basic-auth user, a verified client
// certificate, or root (or the agent's own user) over loopback, which the
// kernel tells apart from the node's other users (internal/sockdiag).
// /-/ready answers 503 until the BPF objects are loaded and the first
// snapshot is taken, and again while the agent shuts down (ready.go). Kernel stack
// addresses are served as 0 unless ListenerSettings.KernelAddresses
// serves them to authenticated clients. Each heavy endpoint writes at
// most MaxInFlight responses at once, one per client (503 past it,
// counted); a response is cut off when its client reads nothing for
// StallTimeout, and within WriteTimeout in any case.
package agent
