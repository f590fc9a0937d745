//go:build linux

package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/spanwatch/spanwatch/agent"
	"github.com/spanwatch/spanwatch/config"
	"github.com/spanwatch/spanwatch/snapshot"
)

func init() {
	register(&command{
		name:    "top",
		args:    "[flags]",
		summary: "a live table of every span on the host: rate, errors, p50/p90/p99/max",
		help: `
top attaches to every span source on the host, like run, and redraws a table
of the busiest spans every interval, like top(1) does for processes: each
span with the process that runs it and where (Kubernetes namespace/pod/
container, systemd unit or cgroup). With --config, the rule file's budgets
apply (the OVER column counts slow spans); its rules and webhooks do not.

--sort orders the table: rate (the default), errors, p50, p90, p99, max,
over, span or process. --filter keeps the series that match every one of
its comma-separated terms, LABEL=GLOB or a bare GLOB for the span name, with
the rule files' globs (docs/syntax.md); labels: span, namespace, pod,
container, process, unit, cgroup, container_id, pod_uid.

On a terminal, keys change the view at once: r rate, e errors, 5 p50,
9 p90, p p99, m max, o over budget, n span name, c process, R reverses the
order, / types a filter (Enter applies it, Esc cancels, an empty one clears
it), q quits.

Examples:
  sudo spanwatch top
  sudo spanwatch top --interval 5s --rows 40 --sort p99
  sudo spanwatch top --filter 'namespace=shop,process=!envoy'
  sudo spanwatch top -n 3 > spans.txt    # three refreshes, no screen control`,
		flags: func(fs *flag.FlagSet) func(context.Context, []string) error {
			configFile := fs.String("config", "", "take budgets from this rule `FILE`")
			rows := fs.Int("rows", 30, "show at most `N` spans")
			n := fs.Int("n", 0, "exit after `N` refreshes (0: until interrupted); output is plain text")
			logs := newLogFlags(fs)
			sortBy := fs.String("sort", "rate", "order the table by `KEY`: rate, errors, p50, p90, p99, max, over, span, process")
			filter := fs.String("filter", "", "show only series matching `FILTER`: LABEL=GLOB,... or a span GLOB")
			cflags := config.NewCollectorFlags(fs)
			if err := cflags.SetDefault("interval", "1s"); err != nil {
				panic(err)
			}
			return func(ctx context.Context, args []string) error {
				lo := cflags.LoadOptions()
				cfg, err := config.Parse("(none)", nil, lo)
				if *configFile != "" {
					cfg, err = config.Load(*configFile, lo)
				}
				if err != nil {
					return configError(err)
				}
				var keys topKeys
				keys.view.limit = *rows
				if keys.view.sort, err = parseSortKey(*sortBy); err != nil {
					return usageErrorf("--sort: %v", err)
				}
				if keys.view.filter, err = parseFilter(*filter); err != nil {
					return usageErrorf("--filter: %v", err)
				}
				term := *n == 0 && isTerminal(os.Stdout)
				count := 0
				ctx, cancel := context.WithCancel(ctx)
				defer cancel()
				var mu sync.Mutex // the view and the last snapshot, shared with the keys
				var last *snapshot.Snapshot
				draw := func() {
					if last == nil {
						return
					}
					if term {
						fmt.Print("\033[H\033[2J")
					}
					fmt.Printf("spanwatch top — %s — every %s\n\n", last.Time.Format("15:04:05"), last.Window().Round(time.Millisecond))
					renderTableView(os.Stdout, last, keys.view)
					if term {
						fmt.Println(keys.status())
					} else {
						fmt.Println()
					}
				}
				if term && isTerminal(os.Stdin) {
					in, restore, err := rawKeys(os.Stdin)
					if err != nil {
						return err
					}
					defer restore()
					go func() {
						for b := range in {
							mu.Lock()
							redraw, quit := keys.key(b)
							if redraw {
								draw()
							}
							mu.Unlock()
							if quit {
								cancel()
								return
							}
						}
					}()
				}
				a, err := agent.New(cfg.BudgetsOnly(), agent.Options{
					Logger:   logs.logger(),
					Notifier: &printNotifier{w: os.Stderr, mu: new(sync.Mutex)},
					OnSnapshot: func(s *snapshot.Snapshot) {
						if ctx.Err() != nil {
							return // the final snapshot at exit
						}
						mu.Lock()
						last = s
						draw()
						mu.Unlock()
						count++
						if *n > 0 && count >= *n {
							cancel()
						}
					},
				})
				if err != nil {
					return err
				}
				return a.Run(ctx)
			}
		},
	})
}

func isTerminal(f *os.File) bool {
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}
