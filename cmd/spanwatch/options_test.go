//go:build linux

package main

import (
	"flag"
	"testing"
	"time"

	"github.com/spanwatch/spanwatch/config"
)

// TestCollectorFlags checks that the collector flags reach the agent's
// settings, over the file's values or under them when not given.
func TestCollectorFlags(t *testing.T) {
	for _, tc := range []struct {
		name     string
		args     []string
		file     string
		multi    bool
		interval time.Duration
		series   uint32
	}{
		{"defaults", nil, "budgets: []\n", false, config.DefaultInterval, 0},
		{"flag", []string{"-no-uprobe-multi"}, "budgets: []\n", true, config.DefaultInterval, 0},
		{"file", nil, "collector:\n  no_uprobe_multi: true\n  interval: 2s\n", true, 2 * time.Second, 0},
		{"file off", nil, "collector:\n  no_uprobe_multi: false\n", false, config.DefaultInterval, 0},
		{"flag over file", []string{"-interval", "3s", "-max-series", "100"}, "collector:\n  interval: 2s\n  max_series: 500\n", false, 3 * time.Second, 100},
		{"file over default", nil, "collector:\n  max_series: 500\n", false, config.DefaultInterval, 500},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fs := flag.NewFlagSet("run", flag.ContinueOnError)
			cf := config.NewCollectorFlags(fs)
			if err := fs.Parse(tc.args); err != nil {
				t.Fatal(err)
			}
			cfg, err := config.Parse("rules.yaml", []byte(tc.file), cf.LoadOptions())
			if err != nil {
				t.Fatal(err)
			}
			c := cfg.Collector
			if c.NoUprobeMulti != tc.multi || c.Interval != tc.interval || c.MaxSeries != tc.series {
				t.Errorf("settings = %+v, want no_uprobe_multi %v, interval %s, max_series %d", c, tc.multi, tc.interval, tc.series)
			}
		})
	}
}
