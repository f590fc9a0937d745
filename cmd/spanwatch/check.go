package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/spanwatch/spanwatch/config"
)

func init() {
	register(&command{
		name:    "check",
		args:    "[--schema] FILE...",
		summary: "validate configuration files the way run loads them, without BPF",
		help: `
check loads each configuration file the way run does, everything but the
kernel: it compiles every condition, template, glob and Rego policy (reading
the policies' data files), validates the collector: section (values the
kernel would refuse included), the budgets against the kernel's limits
(range, how many, a glob's length), the USDT and tracepoint sources:
against the kernel's maps, the webhooks and routing
as the notifier will (with the outbox's directory and every credentials file
they name), and external_url. It prints "FILE: OK (N rules, M policies, K
budgets)" or every problem found, at once, as "file:line:col: message";
after OK, "file:line:col: warning: ..." lines name what loads but is most
likely a mistake (a template reading a label its alerts never have). A
file check accepts, run accepts too, until the kernel has its say. It exits
1 if any file has a problem, so it can gate a deploy or a CI job.

Examples:
  spanwatch check /etc/spanwatch/spanwatch.yaml
  spanwatch check examples/*/spanwatch.yaml
  spanwatch check --schema > spanwatch.schema.json   # JSON Schema for editors`,
		flags: func(fs *flag.FlagSet) func(context.Context, []string) error {
			printSchema := fs.Bool("schema", false, "print the configuration file's JSON Schema and exit")
			return func(ctx context.Context, args []string) error {
				if *printSchema {
					_, err := os.Stdout.Write(config.Schema())
					return err
				}
				if len(args) == 0 {
					return usageErrorf("no configuration files given")
				}
				return checkFiles(os.Stdout, args)
			}
		},
	})
}

// checkFiles validates each file and reports on w.
func checkFiles(w io.Writer, files []string) error {
	failed := 0
	for _, f := range files {
		cfg, err := config.Load(f, config.LoadOptions{})
		if err != nil {
			failed++
			fmt.Fprintf(w, "%s: FAILED\n", f)
			for _, line := range errorLines(err) {
				fmt.Fprintf(w, "  %s\n", line)
			}
			continue
		}
		r := cfg.Rules
		fmt.Fprintf(w, "%s: OK (%d rules, %d policies, %d budgets)\n", f, len(r.Rules), len(r.Policies), len(r.Budgets))
		for _, warn := range cfg.Warnings() {
			fmt.Fprintf(w, "  %s\n", strings.ReplaceAll(warn.Error(), "\n", "\n  "))
		}
	}
	if failed > 0 {
		return fmt.Errorf("%d of %d files failed", failed, len(files))
	}
	return nil
}

// errorLines splits a configuration error into its problems, one per
// line; a problem's own line breaks (a Rego compiler's) are indented.
func errorLines(err error) []string {
	var list config.ErrorList
	if !errors.As(err, &list) {
		return []string{strings.ReplaceAll(err.Error(), "\n", "\n  ")}
	}
	out := make([]string, len(list))
	for i, e := range list {
		out[i] = strings.ReplaceAll(e.Error(), "\n", "\n  ")
	}
	return out
}

// configError formats a configuration's problems for run's exit message,
// the same lines check prints.
func configError(err error) error {
	lines := errorLines(err)
	if len(lines) == 1 {
		return errors.New(lines[0])
	}
	return fmt.Errorf("%d problems:\n  %s", len(lines), strings.Join(lines, "\n  "))
}
