package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"regexp"
	"strings"

	"github.com/spanwatch/spanwatch/detector/ruletest"
)

func init() {
	register(&command{
		name:    "test",
		args:    "[--schema] FILE...",
		summary: "run rule unit tests: feed snapshots to the rules and compare the alerts",
		help: `
test runs rule unit tests, like "promtool test rules": each test file names
a rule file, feeds it a sequence of snapshots (inline, or JSON recorded by
"spanwatch run --output") at given evaluation times, and compares the alerts
after chosen steps (labels, annotations, state) with the expected ones. It
prints PASS or FAIL per test case, with the differences, and exits 1 if any
test case fails.

A test file looks like:

  rule_file: rules.yaml
  interval: 10s
  tests:
    - name: checkout p99 pages after 30s
      steps:
        - series: [{span: checkout, count: 100, p99: 250ms}]
          repeat: 4
      expect:
        - at: 30s
          alerts:
            - labels: {alertname: CheckoutSlow, span: checkout}
              state: firing

Examples:
  spanwatch test rules.test.yaml
  spanwatch test examples/rego/spanwatch.test.yaml
  spanwatch test --run 'overrun' examples/rego/spanwatch.test.yaml
  spanwatch test --schema > spanwatch-test.schema.json`,
		flags: func(fs *flag.FlagSet) func(context.Context, []string) error {
			printSchema := fs.Bool("schema", false, "print the test file's JSON Schema and exit")
			runRE := fs.String("run", "", "run only test cases whose name matches this `REGEXP`")
			return func(ctx context.Context, args []string) error {
				if *printSchema {
					_, err := os.Stdout.Write(ruletest.Schema())
					return err
				}
				if len(args) == 0 {
					return usageErrorf("no test files given")
				}
				var filter *regexp.Regexp
				if *runRE != "" {
					re, err := regexp.Compile(*runRE)
					if err != nil {
						return usageErrorf("--run: %v", err)
					}
					filter = re
				}
				return testFiles(ctx, os.Stdout, args, filter)
			}
		},
	})
}

// testFiles runs each test file and reports on w; with a filter, only the
// test cases whose names match count.
func testFiles(ctx context.Context, w io.Writer, files []string, filter *regexp.Regexp) error {
	var passed, failed, broken int
	for _, f := range files {
		results, err := ruletest.RunFile(ctx, f)
		if err != nil {
			broken++
			fmt.Fprintf(w, "%s: ERROR\n  %v\n", f, err)
			continue
		}
		fmt.Fprintf(w, "%s\n", f)
		for _, r := range results {
			if filter != nil && !filter.MatchString(r.Name) {
				continue
			}
			if r.Passed() {
				passed++
				fmt.Fprintf(w, "  PASS  %s\n", r.Name)
				continue
			}
			failed++
			fmt.Fprintf(w, "  FAIL  %s\n", r.Name)
			for _, line := range r.Failures {
				fmt.Fprintf(w, "        %s\n", strings.ReplaceAll(line, "\n", "\n        "))
			}
		}
	}
	fmt.Fprintf(w, "%d passed, %d failed", passed, failed)
	if broken > 0 {
		fmt.Fprintf(w, ", %d files could not run", broken)
	}
	fmt.Fprintln(w)
	if failed > 0 || broken > 0 {
		return fmt.Errorf("%d test cases failed, %d files could not run", failed, broken)
	}
	return nil
}
