//go:build linux

package main

import (
	"flag"
	"fmt"
	"log/slog"
	"strings"
	"sync/atomic"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/spanwatch/spanwatch/collector"
	"github.com/spanwatch/spanwatch/policy"
)

// collectorOptions are the collector's settings: the rule file's
// collector: section, overridden by flags that were set.
type collectorOptions struct {
	Interval     time.Duration `yaml:"interval"`
	Sources      []string      `yaml:"sources"`
	Binaries     []string      `yaml:"binaries"`
	MaxSeries    uint32        `yaml:"max_series"`
	RingbufBytes uint32        `yaml:"ringbuf_bytes"`
	ForceKprobe  bool          `yaml:"force_kprobe"`
	// NoUprobeMulti attaches uprobes through the perf_uprobe PMU (needs
	// CAP_SYS_ADMIN) even where the kernel has uprobe_multi links.
	NoUprobeMulti bool          `yaml:"no_uprobe_multi"`
	ScanInterval  time.Duration `yaml:"scan_interval"`

	set map[string]bool // flags given on the command line
}

func (o *collectorOptions) flags(fs *flag.FlagSet) {
	fs.DurationVar(&o.Interval, "interval", 10*time.Second, "snapshot and evaluate every `DURATION`")
	fs.Func("source", "span sources to attach: user_events, marker (repeat or comma-separate; default both)", func(s string) error {
		for _, x := range strings.Split(s, ",") {
			o.Sources = append(o.Sources, strings.TrimSpace(x))
		}
		return nil
	})
	fs.Func("binary", "uprobe the span SDK's marker in this `PATH` too (besides the /proc scan; repeatable)", func(s string) error {
		o.Binaries = append(o.Binaries, s)
		return nil
	})
	fs.BoolVar(&o.ForceKprobe, "force-kprobe", false, "attach the user_events source with a kprobe instead of fentry")
	fs.BoolVar(&o.NoUprobeMulti, "no-uprobe-multi", false, "attach uprobes through perf_event_open (needs CAP_SYS_ADMIN), as before kernel 6.6, instead of uprobe_multi links")
	fs.Var(uint32Flag{&o.MaxSeries}, "max-series", "bound the kernel's stats map to `N` span/cgroup series (default 16384)")
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

// merge applies the rule file's collector: section under the flags set.
func (o collectorOptions) merge(rules *policy.Config) (collectorOptions, error) {
	out := o
	if rules.Collector.Kind != 0 {
		var file collectorOptions
		if err := decodeStrict(rules.Name, &rules.Collector, &file, "interval", "sources", "binaries", "max_series", "ringbuf_bytes", "force_kprobe", "no_uprobe_multi", "scan_interval"); err != nil {
			return o, err
		}
		if !o.set["interval"] && file.Interval > 0 {
			out.Interval = file.Interval
		}
		if !o.set["source"] && len(file.Sources) > 0 {
			out.Sources = file.Sources
		}
		out.Binaries = append(out.Binaries, file.Binaries...)
		if !o.set["max-series"] && file.MaxSeries > 0 {
			out.MaxSeries = file.MaxSeries
		}
		if file.RingbufBytes > 0 {
			out.RingbufBytes = file.RingbufBytes
		}
		if !o.set["force-kprobe"] && file.ForceKprobe {
			out.ForceKprobe = true
		}
		if !o.set["no-uprobe-multi"] && file.NoUprobeMulti {
			out.NoUprobeMulti = true
		}
		if file.ScanInterval != 0 {
			out.ScanInterval = file.ScanInterval
		}
	}
	if out.Interval <= 0 {
		return o, fmt.Errorf("interval must be positive, not %s", out.Interval)
	}
	for _, s := range out.Sources {
		if s != "user_events" && s != "marker" {
			return o, fmt.Errorf("unknown source %q: want user_events or marker (USDT probes are declared under sources: usdt: in the rule file)", s)
		}
	}
	return out, nil
}

func (o collectorOptions) collectorConfig(log *slog.Logger) collector.Config {
	cfg := collector.Config{
		Logger:         log,
		ForceKprobe:    o.ForceKprobe,
		NoUprobeMulti:  o.NoUprobeMulti,
		MaxSeries:      o.MaxSeries,
		RingbufBytes:   o.RingbufBytes,
		MarkerBinaries: o.Binaries,
		ScanInterval:   o.ScanInterval,
	}
	for _, s := range o.Sources {
		switch s {
		case "user_events":
			cfg.Sources.UserEvents = true
		case "marker":
			cfg.Sources.Marker = true
		}
	}
	return cfg
}

// decodeStrict decodes a mapping node into v, refusing keys not in known
// with the file:line:col of the offending key.
func decodeStrict(file string, n *yaml.Node, v any, known ...string) error {
	if n.Kind != yaml.MappingNode {
		return fmt.Errorf("%s:%d:%d: want a mapping", file, n.Line, n.Column)
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k := n.Content[i]
		ok := false
		for _, x := range known {
			ok = ok || k.Value == x
		}
		if !ok {
			return fmt.Errorf("%s:%d:%d: unknown key %q (known: %s)", file, k.Line, k.Column, k.Value, strings.Join(known, ", "))
		}
	}
	if err := n.Decode(v); err != nil {
		return fmt.Errorf("%s:%d:%d: %v", file, n.Line, n.Column, err)
	}
	return nil
}

// reloadFailures counts rule reloads that failed and kept the old rules.
var reloadFailures atomic.Uint64
