//go:build linux

package main

import (
	"flag"
	"fmt"
	"strings"

	"github.com/spanwatch/spanwatch/agent"
	"github.com/spanwatch/spanwatch/internal/duration"
	"github.com/spanwatch/spanwatch/internal/rotate"
)

// collectorFlags are the flags that override the configuration file's
// collector: section.
type collectorFlags struct {
	fs *flag.FlagSet
	s  agent.CollectorSettings
}

// flagKeys maps each flag to the collector: key it overrides.
var flagKeys = map[string]string{
	"interval": "interval", "source": "sources", "binary": "binaries", "force-kprobe": "force_kprobe",
	"no-uprobe-multi": "no_uprobe_multi", "max-series": "max_series", "memory-budget": "memory_budget",
}

func newCollectorFlags(fs *flag.FlagSet) *collectorFlags {
	o := &collectorFlags{fs: fs}
	duration.Var(fs, &o.s.Interval, "interval", agent.DefaultInterval, "snapshot and evaluate every `DURATION`")
	fs.Func("source", "span sources to attach: user_events, marker (repeat or comma-separate; default both)", func(s string) error {
		for _, x := range strings.Split(s, ",") {
			o.s.Sources = append(o.s.Sources, strings.TrimSpace(x))
		}
		return nil
	})
	fs.Func("binary", "uprobe the span SDK's marker in this `PATH` too (besides the /proc scan; repeatable)", func(s string) error {
		o.s.Binaries = append(o.s.Binaries, s)
		return nil
	})
	fs.BoolVar(&o.s.ForceKprobe, "force-kprobe", false, "attach the user_events source with a kprobe instead of fentry")
	fs.BoolVar(&o.s.NoUprobeMulti, "no-uprobe-multi", false, "attach uprobes through perf_event_open (needs CAP_SYS_ADMIN), as before kernel 6.6, instead of uprobe_multi links")
	fs.Var(uint32Flag{&o.s.MaxSeries}, "max-series", "the kernel holds `N` series (span, cgroup, labels; default: the most the memory budget holds, up to 131072; at most 262143)")
	fs.Func("memory-budget", "the memory the whole agent may use, e.g. 512MiB, 1GiB (default: 90% of the cgroup's memory limit, else a quarter of the machine's memory, at most 1GiB)", func(s string) error {
		n, err := rotate.ParseSize(s)
		if err != nil {
			return err
		}
		if n <= 0 {
			return fmt.Errorf("must be positive, not %s", s)
		}
		o.s.MemoryBudget = uint64(n)
		return nil
	})
	return o
}

// loadOptions returns the flags' values, naming those that were given.
func (o *collectorFlags) loadOptions() agent.LoadOptions {
	flags := map[string]string{}
	o.fs.Visit(func(f *flag.Flag) {
		if key, ok := flagKeys[f.Name]; ok {
			flags[key] = "--" + f.Name
		}
	})
	return agent.LoadOptions{Collector: o.s, Flags: flags}
}

type uint32Flag struct{ p *uint32 }

func (f uint32Flag) String() string {
	if f.p == nil {
		return "0"
	}
	return fmt.Sprint(*f.p)
}

func (f uint32Flag) Set(s string) error {
	var v uint32
	_, err := fmt.Sscan(s, &v)
	*f.p = v
	return err
}
