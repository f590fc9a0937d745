// Package agent is spanwatch's agent: the loop that, every interval, takes
// a snapshot of what the kernel aggregated (package collector), evaluates
// the rules and policies over it (package detector) and delivers the
// alerts (package notify), with the wiring around it: the budgets pushed
// into BPF, the USDT sources and their in-flight watcher, the output file,
// the HTTP listener, and reloading.
//
// The configuration is package config's: config.Load reads and validates
// every section of the file, the way the agent runs it but without BPF;
// spanwatch check is config.Load, and spanwatch run is config.Load, then
// New and Run.
//
// The configuration is reloaded when its files change (polled every
// second, independently of the snapshot interval) and on SIGHUP, by
// package config's Coordinator, as a transaction: each part of the agent
// that applies a section live subscribes (reload.go): the webhooks and
// routing (the dispatcher builds them), the budgets (written into the
// kernel's set of budgets not in force), the rules with their policies,
// external labels and policy limits (the detector), the listener's
// external_url, and collector.interval (the loop). Every subscriber
// prepares first, then all commit, or none: the kernel switches budget
// sets with one store, so spans are judged by the old budgets or the new,
// never a mix. A file that does not load, or a part that does not prepare
// (budgets the kernel cannot hold), keeps the whole running
// configuration; the failure is logged and counted
// (spanwatch_rule_reload_failures_total,
// spanwatch_config_last_reload_successful, GET /api/status). Settings
// that shape the BPF objects or what is attached (the other collector:
// keys, the sources, the outbox's path, webhooks where none ran, and no
// webhooks where some ran) keep their running values: each is logged as an
// error saying a restart applies it, counted in
// spanwatch_config_restart_pending and listed by GET /api/status, while
// the rest of the file applies. What delivery was doing (backoff, group
// timers) carries over every reload.
//
// A restart resumes where the agent stopped, even after SIGKILL: the
// outbox holds the alerts in delivery, and the detector's alert state
// (firing and pending alerts with their startsAt and for: progress, the
// range history, the anomaly baselines) is saved in it as the agent runs
// and restored at start, so a restart neither fires an alert again as a
// new episode nor resolves one (package detector, Restore).
//
// The agent holds itself to a memory budget (internal/memory,
// docs/memory.md): config.Load finds it (collector.memory_budget, else the
// cgroup's limit, else a default) and divides it (Config.Memory: the
// series capacity when max_series is not set, a max_series checked against
// it, the range history's bound, the overrun queues, the symbolizer's
// memory, Go's soft limit); Run applies the plan and, every second,
// measures the agent's memory and sheds detail in the budget's order
// (stack detail, unused range history, stale exports, range history
// depth), never counts, saying so on /metrics. --output writes a snapshot
// in lines of bounded length (snapshot.LineWriter).
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
// (config.ListenerSettings.WebConfigFile). /metrics, /-/healthy and
// /-/ready go to every client the web configuration admits; /snapshot and
// /api/* only to an authenticated one: a basic-auth user, a verified
// client certificate, or root (or the agent's own user) over loopback,
// which the kernel tells apart from the node's other users
// (internal/sockdiag). /-/ready answers 503 until the BPF objects are
// loaded and the first snapshot is taken, and again while the agent shuts
// down (ready.go). Kernel stack addresses are served as 0 unless
// config.ListenerSettings.KernelAddresses serves them to authenticated
// clients. Each heavy endpoint writes at
// most MaxInFlight responses at once, one per client (503 past it,
// counted); a response is cut off when its client reads nothing for
// StallTimeout, and within WriteTimeout in any case.
package agent
