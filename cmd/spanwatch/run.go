//go:build linux

package main

import (
	"cmp"
	"context"
	"flag"
	"fmt"
	"io"
	"os"

	"github.com/spanwatch/spanwatch/agent"
	"github.com/spanwatch/spanwatch/config"
	"github.com/spanwatch/spanwatch/internal/rotate"
	"github.com/spanwatch/spanwatch/snapshot"
)

func init() {
	register(&command{
		name:    "run",
		args:    "--config FILE [flags]",
		summary: "collect spans, evaluate the rules every interval, deliver alerts (the agent)",
		help: `
run is the agent: it loads the BPF programs, attaches every span source
(user_events, the span SDK's marker in any binary that has it, and the USDT
probes the rule file declares), and every interval reads the kernel's
aggregates into a snapshot, evaluates the rule file's rules and Rego
policies over it, and sends alerts to its webhooks. A span slower than its
budget raises an alert at once, with the stack of the thread that ran it.

Before it loads anything into the kernel, run validates the whole file the
way "spanwatch check" does, and stops on any problem. Each snapshot is
written as one JSON line to --output (see snapshot/schema.json); spanwatch
test and spanwatch stacks read them back. With --output-max-size the file
rotates before it would pass that size: FILE becomes FILE.1, FILE.1
FILE.2, and so on, --output-keep of them kept, each holding whole lines
(read them oldest first: cat FILE.2 FILE.1 FILE | spanwatch stacks). The file is reloaded on SIGHUP and
when it or a file it references changes (polled every second); a bad file
keeps the running configuration; settings that need a restart are logged as
errors and wait for it while the rest applies. On SIGTERM or SIGINT, run
takes a final snapshot, evaluates it, writes its alerts to the outbox and
exits.

With --metrics-addr, run serves /metrics (Prometheus), /-/healthy (200
while it serves), /-/ready (200 once the BPF objects are loaded and the
first snapshot is taken; 503 while starting or shutting down), /snapshot (the newest snapshot; ?span=NAME&cgroup_id=ID for one series,
which alerts link to in their generatorURL), /api/alerts, /api/status and
/api/dead-letters. TLS and basic authentication come from a Prometheus
exporter web configuration file (--web.config.file, or the listener:
section's web_config_file). /metrics goes to every client the web
configuration admits; /snapshot and /api/*, which show every process's
stacks, pids and cgroups, only to an authenticated client (a basic-auth
user, a verified client certificate) or to root over loopback. Kernel
stack addresses are served as 0 unless listener.kernel_addresses is set.

Needs root, or CAP_BPF + CAP_PERFMON (+ CAP_SYS_PTRACE to see processes of
other users and containers). Uprobes (the SDK's marker, USDT probes) attach as
uprobe_multi links on kernel 6.6+; before 6.6, or with --no-uprobe-multi, they
go through the perf_uprobe PMU, which also needs CAP_SYS_ADMIN.

Examples:
  spanwatch run --config /etc/spanwatch/rules.yaml
  spanwatch run --config rules.yaml --output snapshots.jsonl --metrics-addr 127.0.0.1:9464
  spanwatch run --config rules.yaml --output /var/log/spanwatch/snapshots.jsonl --output-max-size 100M --output-keep 5
  spanwatch run --config rules.yaml --log-format json
  spanwatch run --config rules.yaml --metrics-addr :9464 --external-url http://$NODE_IP:9464
  spanwatch run --config rules.yaml --metrics-addr :9464 --web.config.file /etc/spanwatch/web.yml`,
		flags: func(fs *flag.FlagSet) func(context.Context, []string) error {
			configFile := fs.String("config", "", "the configuration `FILE` (budgets, rules, policies, webhooks, sources, collector)")
			output := fs.String("output", "", "write each snapshot as a JSON line to `FILE` (- for stdout)")
			metricsAddr := fs.String("metrics-addr", "", "serve /metrics, /snapshot and /api/* on `ADDR`, e.g. 127.0.0.1:9464")
			webConfig := fs.String("web.config.file", "", "TLS and basic authentication for the listener: a Prometheus exporter web configuration `FILE` (overrides listener.web_config_file)")
			externalURL := fs.String("external-url", "", "the listener as seen from outside, for alerts' generatorURL (`URL`; overrides external_url:)")
			logs := newLogFlags(fs)
			maxSize := fs.String("output-max-size", "", "rotate --output when it would grow past `SIZE` (e.g. 100M, 1GiB; default: never)")
			keep := fs.Int("output-keep", 5, "keep `N` rotated files of --output (FILE.1 the newest ... FILE.N)")
			maxLine := fs.String("output-max-line", "1MiB", "split a snapshot longer than `SIZE` over several lines of --output (parts that spanwatch test and stacks join; at least 16KiB)")
			cflags := config.NewCollectorFlags(fs)
			return func(ctx context.Context, args []string) error {
				if *configFile == "" {
					return usageErrorf("--config FILE is required (try \"spanwatch demo\" for a built-in one)")
				}
				if len(args) > 0 {
					return usageErrorf("unexpected arguments %q", args)
				}
				lo := cflags.LoadOptions()
				lo.ExternalURL = *externalURL
				lo.WebConfigFile = *webConfig
				cfg, err := config.Load(*configFile, lo)
				if err != nil {
					return configError(err)
				}
				var limit int64
				if *maxSize != "" {
					if *output == "" || *output == "-" {
						return usageErrorf("--output-max-size rotates a file: give --output FILE")
					}
					if limit, err = rotate.ParseSize(*maxSize); err != nil || limit <= 0 {
						return usageErrorf("--output-max-size: %v", cmp.Or(err, fmt.Errorf("must be positive")))
					}
				}
				lineMax, err := rotate.ParseSize(*maxLine)
				if err != nil || lineMax < snapshot.MinMaxLine || lineMax > 1<<30 {
					return usageErrorf("--output-max-line: %v", cmp.Or(err, fmt.Errorf("%s is out of range: want 16KiB to 1GiB", *maxLine)))
				}
				if *keep < 0 {
					return usageErrorf("--output-keep must not be negative, not %d", *keep)
				}
				var out io.Writer
				switch *output {
				case "":
				case "-":
					out = os.Stdout
				default:
					f, err := rotate.Open(*output, limit, *keep)
					if err != nil {
						return err
					}
					defer f.Close()
					out = f
				}
				return startAgent(ctx, cfg, agent.Options{Logger: logs.logger(), Output: out, OutputMaxLine: int(lineMax), ListenAddr: *metricsAddr})
			}
		},
	})
}

// startAgent starts the agent and runs it until ctx ends; tests replace it
// to see that a bad file stops run before anything is loaded.
var startAgent = func(ctx context.Context, cfg *config.Config, opts agent.Options) error {
	a, err := agent.New(cfg, opts)
	if err != nil {
		return err
	}
	return a.Run(ctx)
}
