//go:build linux

package main

import (
	"flag"
	"testing"

	"github.com/spanwatch/spanwatch/policy"
)

// TestNoUprobeMulti checks that the perf-uprobe escape hatch reaches the
// collector's config from the flag and from the rule file.
func TestNoUprobeMulti(t *testing.T) {
	for _, tc := range []struct {
		name  string
		args  []string
		rules string
		want  bool
	}{
		{"default", nil, "budgets: []\n", false},
		{"flag", []string{"-no-uprobe-multi"}, "budgets: []\n", true},
		{"rule file", nil, "collector:\n  no_uprobe_multi: true\n", true},
		{"rule file off", nil, "collector:\n  no_uprobe_multi: false\n", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fs := flag.NewFlagSet("run", flag.ContinueOnError)
			var o collectorOptions
			o.flags(fs)
			if err := fs.Parse(tc.args); err != nil {
				t.Fatal(err)
			}
			o.set = setFlags(fs)
			rules, err := policy.Parse("rules.yaml", []byte(tc.rules), policy.Options{})
			if err != nil {
				t.Fatal(err)
			}
			merged, err := o.merge(rules)
			if err != nil {
				t.Fatal(err)
			}
			if got := merged.collectorConfig(nil).NoUprobeMulti; got != tc.want {
				t.Errorf("collector.Config.NoUprobeMulti = %v, want %v", got, tc.want)
			}
		})
	}
}
