package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/spanwatch/spanwatch/notify"
	"github.com/spanwatch/spanwatch/policy"
)

func init() {
	register(&command{
		name:    "check",
		args:    "[--schema] FILE...",
		summary: "validate rule files: budgets, rules, Rego policies and the files they name",
		help: `
check loads each rule file the way run does, compiling every condition,
template, glob and Rego policy (and reading the policies' data files), and
checks the webhooks and routing sections as the notifier will, and prints
"FILE: OK (N rules, M policies, K budgets)" or every problem found as
"file:line:col: message". It exits 1 if any file has a problem, so it can
gate a deploy or a CI job.

Examples:
  spanwatch check /etc/spanwatch/spanwatch.yaml
  spanwatch check examples/*/spanwatch.yaml
  spanwatch check --schema > spanwatch.schema.json   # JSON Schema for editors`,
		flags: func(fs *flag.FlagSet) func(context.Context, []string) error {
			printSchema := fs.Bool("schema", false, "print the rule file's JSON Schema and exit")
			return func(ctx context.Context, args []string) error {
				if *printSchema {
					_, err := os.Stdout.Write(policy.Schema())
					return err
				}
				if len(args) == 0 {
					return usageErrorf("no rule files given")
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
		cfg, err := policy.LoadFile(f)
		if err != nil {
			failed++
			fmt.Fprintf(w, "%s: FAILED\n", f)
			var list policy.ErrorList
			if errors.As(err, &list) {
				for _, e := range list {
					fmt.Fprintf(w, "  %s\n", strings.ReplaceAll(e.Error(), "\n", "\n  "))
				}
			} else {
				fmt.Fprintf(w, "  %v\n", err)
			}
			continue
		}
		// The delivery sections belong to package notify: check them the
		// way run will, so a typo in a webhook fails here, not at start.
		if _, err := notify.ParseConfig(f, &cfg.Webhooks, &cfg.Routing); err != nil {
			failed++
			fmt.Fprintf(w, "%s: FAILED\n  %s\n", f, strings.ReplaceAll(err.Error(), "\n", "\n  "))
			continue
		}
		fmt.Fprintf(w, "%s: OK (%d rules, %d policies, %d budgets)\n", f, len(cfg.Rules), len(cfg.Policies), len(cfg.Budgets))
	}
	if failed > 0 {
		return fmt.Errorf("%d of %d files failed", failed, len(files))
	}
	return nil
}
