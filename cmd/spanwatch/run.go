//go:build linux

package main

import (
	"context"
	"flag"
	"io"
	"log/slog"
	"os"

	"github.com/spanwatch/spanwatch/policy"
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

Each snapshot is written as one JSON line to --output (see
snapshot/schema.json); spanwatch test and spanwatch stacks read them back.
The rule file is reloaded on SIGHUP and when it or a file it references
changes; a bad file keeps the old rules running.

Needs root, or CAP_BPF + CAP_PERFMON (+ CAP_SYS_PTRACE to see processes of
other users and containers). Uprobes (the SDK's marker, USDT probes) attach as
uprobe_multi links on kernel 6.6+; before 6.6, or with --no-uprobe-multi, they
go through the perf_uprobe PMU, which also needs CAP_SYS_ADMIN.

Examples:
  spanwatch run --config /etc/spanwatch/rules.yaml
  spanwatch run --config rules.yaml --output snapshots.jsonl --metrics-addr 127.0.0.1:9464`,
		flags: func(fs *flag.FlagSet) func(context.Context, []string) error {
			config := fs.String("config", "", "the rule `FILE` (budgets, rules, policies, webhooks, sources)")
			output := fs.String("output", "", "write each snapshot as a JSON line to `FILE` (- for stdout)")
			metricsAddr := fs.String("metrics-addr", "", "serve /metrics (Prometheus) and /snapshot on `ADDR`, e.g. 127.0.0.1:9464")
			verbose := fs.Bool("v", false, "log debug messages")
			var opts collectorOptions
			opts.flags(fs)
			return func(ctx context.Context, args []string) error {
				if *config == "" {
					return usageErrorf("--config FILE is required (try \"spanwatch demo\" for a built-in one)")
				}
				if len(args) > 0 {
					return usageErrorf("unexpected arguments %q", args)
				}
				opts.set = setFlags(fs)
				log := newLogger(*verbose)
				rules, err := policy.LoadFile(*config)
				if err != nil {
					return err
				}
				var out io.Writer
				switch *output {
				case "":
				case "-":
					out = os.Stdout
				default:
					f, err := os.OpenFile(*output, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
					if err != nil {
						return err
					}
					defer f.Close()
					out = f
				}
				return runAgent(ctx, agentConfig{log: log, rules: rules, path: *config, opts: opts, output: out, metricsAddr: *metricsAddr})
			}
		},
	})
}

func setFlags(fs *flag.FlagSet) map[string]bool {
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	return set
}

func newLogger(verbose bool) *slog.Logger {
	level := slog.LevelInfo
	if verbose {
		level = slog.LevelDebug
	}
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
}
