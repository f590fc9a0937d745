package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"

	"github.com/spanwatch/spanwatch/internal/profile"
	"github.com/spanwatch/spanwatch/snapshot"
)

func init() {
	register(&command{
		name:    "stacks",
		args:    "[--span NAME] [--format folded|pprof|json|text] [--input FILE] [--output FILE]",
		summary: "turn recorded overrun stacks into pprof, folded (flame graph) or JSON",
		help: `Reads overruns (spans slower than their budget, with the stacks captured
when they ended) from a file that "spanwatch run --output FILE" wrote, or
from JSON lines of overruns, and writes their stacks grouped by span,
command and stack:

  pprof   a gzipped pprof profile: one sample per distinct stack, valued by
          the number of overruns and their total duration (the default
          sample); samples are labelled span=NAME and comm=NAME.
  folded  one line per stack, "outer;...;inner VALUE", for flamegraph.pl,
          speedscope or inferno; kernel frames end in "_[k]".
  json    the grouped stacks with their counts, durations and example
          trace ids (internal/profile/report.schema.json).
  text    the grouped stacks for reading, innermost frames first
          (--depth frames each).

Examples:

  spanwatch stacks --input run.jsonl --span checkout --format pprof --output checkout.pb.gz
  go tool pprof -top checkout.pb.gz
  spanwatch stacks --input run.jsonl --format folded | flamegraph.pl > stacks.svg

See docs/stacks.md for why a C or C++ stack may stop after a frame or two.`,
		flags: func(fs *flag.FlagSet) func(context.Context, []string) error {
			span := fs.String("span", "", "only overruns of this span (exact name or glob, e.g. 'checkout*'); all when empty")
			format := fs.String("format", "folded", "output format: folded, pprof, json or text")
			depth := fs.Int("depth", 10, "text: frames shown per stack, 0 for all")
			input := fs.String("input", "-", "file of snapshots or overruns (JSON), - for standard input")
			output := fs.String("output", "-", "output file, - for standard output")
			value := fs.String("value", string(profile.ValueCount), "what folded lines count: count (overruns) or duration (nanoseconds)")
			return func(ctx context.Context, args []string) error {
				if len(args) > 0 {
					return usageErrorf("unexpected arguments %q", args)
				}
				switch *format {
				case "folded", "pprof", "json", "text":
				default:
					return usageErrorf("--format %q: want folded, pprof, json or text", *format)
				}
				if v := profile.Value(*value); v != profile.ValueCount && v != profile.ValueDuration {
					return usageErrorf("--value %q: want count or duration", *value)
				}
				return runStacks(*input, *output, *span, *format, profile.Value(*value), *depth)
			}
		},
	})
}

func runStacks(input, output, span, format string, value profile.Value, depth int) error {
	var in io.Reader = os.Stdin
	if input != "-" {
		f, err := os.Open(input)
		if err != nil {
			return fmt.Errorf("open input: %w", err)
		}
		defer f.Close()
		in = f
	}
	all, err := profile.Read(in)
	if err != nil {
		return fmt.Errorf("read %s: %w", input, err)
	}
	overruns, err := profile.Select(all, span)
	if err != nil {
		return usageErrorf("--span: %v", err)
	}
	if len(overruns) == 0 {
		if span != "" && len(all) > 0 {
			return fmt.Errorf("no overruns of span %q in %s; it has overruns of: %s", span, input, spanNames(all))
		}
		return fmt.Errorf("no overruns in %s: spans within their budgets capture no stacks", input)
	}
	stacks := profile.Aggregate(overruns)

	var out io.Writer = os.Stdout
	var file *os.File
	if output != "-" {
		if file, err = os.Create(output); err != nil {
			return fmt.Errorf("create output: %w", err)
		}
		defer file.Close()
		out = file
	}
	switch format {
	case "folded":
		err = profile.WriteFolded(out, stacks, value)
	case "json":
		err = profile.WriteJSON(out, span, len(overruns), stacks)
	case "text":
		err = profile.WriteText(out, stacks, depth)
	case "pprof":
		start, end := profile.TimeRange(overruns)
		p, perr := profile.Pprof(stacks, start, end)
		if perr != nil {
			return perr
		}
		if err = p.Write(out); err != nil {
			err = fmt.Errorf("write pprof profile: %w", err)
		}
	}
	if err != nil {
		return err
	}
	if file != nil {
		if err := file.Close(); err != nil {
			return fmt.Errorf("close output: %w", err)
		}
	}
	return nil
}

func spanNames(overruns []snapshot.Overrun) string {
	seen := map[string]bool{}
	var names []string
	for _, o := range overruns {
		if !seen[o.Span] {
			seen[o.Span] = true
			names = append(names, o.Span)
		}
	}
	sort.Strings(names)
	return strings.Join(names, ", ")
}
