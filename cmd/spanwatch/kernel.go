package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"strings"

	"github.com/spanwatch/spanwatch/collector"
)

func init() {
	register(&command{
		name:    "kernel",
		args:    "[flags]",
		summary: "print what this machine's kernel gives spanwatch: features, replacements, load tests",
		help: `
kernel probes the running kernel for the facilities spanwatch's BPF
programs use (BPF atomics, bpf_loop, task storage, BPF cookies, sleepable
uprobes, uprobe_multi links, user_events, ...), loads every BPF object on it
as the agent would (small maps, nothing attached), and prints:

  - each kernel feature: whether the kernel has it, and the mainline
    release that brought it;
  - each feature of spanwatch: works, replaced (and by what), or declined
    (and why), with the test that shows it on the kernels spanwatch's CI
    boots (docs/kernels.md has the table for Debian's kernels);
  - each load test: loaded, or what refused it.

The agent logs the same in one line at start (msg=kernel). A load the
kernel's verifier refused names the program and the verifier's reason;
--verifier-log prints its whole log: please report it with this command's
output. Needs root (or CAP_BPF and CAP_PERFMON): without, the probes cannot
tell and say "unknown".

Examples:
  sudo spanwatch kernel
  sudo spanwatch kernel --json
  sudo spanwatch kernel --verifier-log
`,
		flags: func(fs *flag.FlagSet) func(context.Context, []string) error {
			asJSON := fs.Bool("json", false, "print JSON")
			vlog := fs.Bool("verifier-log", false, "print the verifier's whole log of every refused load")
			lf := newLogFlags(fs)
			return func(ctx context.Context, args []string) error {
				if len(args) > 0 {
					return usageErrorf("unexpected arguments %q", args)
				}
				log := lf.logger()
				if !lf.verbose {
					log = nil // the report says it all
				}
				r := collector.CheckKernel(ctx, log)
				if *asJSON {
					enc := json.NewEncoder(os.Stdout)
					enc.SetIndent("", "  ")
					if err := enc.Encode(r); err != nil {
						return err
					}
				} else if err := r.WriteText(os.Stdout); err != nil {
					return err
				}
				if *vlog {
					for _, l := range r.Loads {
						if len(l.Log) > 0 {
							fmt.Printf("\nverifier log of %s:\n%s\n", l.Object, strings.Join(l.Log, "\n"))
						}
					}
				}
				if os.Geteuid() != 0 {
					fmt.Fprintln(os.Stderr, "spanwatch kernel: not root: probes that need CAP_BPF say unknown; run it with sudo")
				}
				return nil
			}
		},
	})
}
