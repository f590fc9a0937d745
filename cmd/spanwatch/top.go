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
	"github.com/spanwatch/spanwatch/snapshot"
)

func init() {
	register(&command{
		name:    "top",
		args:    "[flags]",
		summary: "a live table of every span on the host: rate, errors, p50/p90/p99/max",
		help: `
top attaches to every span source on the host, like run, and redraws a table
of the busiest spans every interval, like top(1) does for processes. With
--config, the rule file's budgets apply (the OVER column counts slow spans);
its rules and webhooks do not.

Examples:
  sudo spanwatch top
  sudo spanwatch top --interval 5s --rows 40
  sudo spanwatch top -n 3 > spans.txt    # three refreshes, no screen control`,
		flags: func(fs *flag.FlagSet) func(context.Context, []string) error {
			config := fs.String("config", "", "take budgets from this rule `FILE`")
			rows := fs.Int("rows", 30, "show at most `N` spans")
			n := fs.Int("n", 0, "exit after `N` refreshes (0: until interrupted); output is plain text")
			verbose := fs.Bool("v", false, "log debug messages")
			cflags := newCollectorFlags(fs)
			fs.Lookup("interval").DefValue = "1s"
			cflags.s.Interval = time.Second
			return func(ctx context.Context, args []string) error {
				lo := cflags.loadOptions()
				cfg, err := agent.Parse("(none)", nil, lo)
				if *config != "" {
					cfg, err = agent.Load(*config, lo)
				}
				if err != nil {
					return configError(err)
				}
				term := *n == 0 && isTerminal(os.Stdout)
				count := 0
				ctx, cancel := context.WithCancel(ctx)
				defer cancel()
				a, err := agent.New(cfg.BudgetsOnly(), agent.Options{
					Logger:   newLogger(*verbose),
					Notifier: &printNotifier{w: os.Stderr, mu: new(sync.Mutex)},
					OnSnapshot: func(s *snapshot.Snapshot) {
						if ctx.Err() != nil {
							return // the final snapshot at exit
						}
						if term {
							fmt.Print("\033[H\033[2J")
						}
						fmt.Printf("spanwatch top — %s — every %s\n\n", s.Time.Format("15:04:05"), s.Window().Round(time.Millisecond))
						renderTable(os.Stdout, s, *rows)
						fmt.Println()
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
