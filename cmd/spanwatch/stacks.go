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
		args:    "[--span NAME [--glob]] [--format folded|pprof|json|text|svg|html] [--input FILE] [--output FILE]",
		summary: "where the time of slow spans went: flame graphs, pprof, folded stacks, JSON",
		help: `Reads overruns (spans slower than their budget) from a file that
"spanwatch run --output FILE" wrote, or from JSON lines of overruns, and
says where their time went: the stacks sampled while each span ran past
its budget (on the CPU, and off it where it blocked), and the stack where
it ended (or stood, when it was reported still running). Frames of the span
SDKs and of the OpenTelemetry SDK ending the span are left out of the top
of the stacks (the recorded overruns keep them).

  svg     a flame graph, one file a browser opens as it is: the span's
          name at the root, its samples by code path, its end stacks under
          "[stack at span end]"; click to zoom, hover for times.
  html    a page with a summary per span (overruns, durations, how much
          the samples cover, the hottest frames) and the flame graph.
  pprof   a gzipped pprof profile, span name at the root: sample values
          overruns, samples and duration (the default); labels span,
          kind (end, on_cpu, off_cpu) and comm.
  folded  one line per stack, "span;outer;...;inner VALUE", for
          flamegraph.pl, speedscope or inferno; kernel frames end in
          "_[k]", off-CPU samples in "[off-cpu]".
  json    the per-span summaries and the grouped stacks
          (internal/profile/report.schema.json).
  text    the same for reading: per span its hottest frames, then each
          stack's innermost frames (--depth frames each).

--value picks what widths and folded values count: duration (span time:
samples by the time they stand for, end stacks by the time no sample
covers), count (overruns, at their end stacks) or samples.

--span matches a span name exactly, whatever characters it holds; with
--glob it is a glob in the rule files' syntax ('checkout*', 'GET /api/*',
'!health').

Examples:

  spanwatch stacks --input run.jsonl --span payment.charge --format svg --output charge.svg
  spanwatch stacks --input run.jsonl --span 'GET /orders/*' --glob --format html --output orders.html
  spanwatch stacks --input run.jsonl --span checkout --format pprof --output checkout.pb.gz
  go tool pprof -top checkout.pb.gz

See docs/stacks.md for how in-span samples are taken and why a C or C++
stack may stop after a frame or two.`,
		flags: func(fs *flag.FlagSet) func(context.Context, []string) error {
			span := fs.String("span", "", "only overruns of this span (its exact name; a glob with --glob); all when empty")
			glob := fs.Bool("glob", false, "--span is a glob, as in rule files (e.g. 'checkout*', '!health')")
			format := fs.String("format", "folded", "output format: folded, pprof, json, text, svg or html")
			depth := fs.Int("depth", 10, "text: frames shown per stack, 0 for all")
			input := fs.String("input", "-", "file of snapshots or overruns (JSON), - for standard input")
			output := fs.String("output", "-", "output file, - for standard output")
			value := fs.String("value", string(profile.ValueDuration), "what widths and folded values count: duration, count (overruns) or samples")
			title := fs.String("title", "", "svg, html: the graph's title (default: the span and the time range)")
			return func(ctx context.Context, args []string) error {
				if len(args) > 0 {
					return usageErrorf("unexpected arguments %q", args)
				}
				switch *format {
				case "folded", "pprof", "json", "text", "svg", "html":
				default:
					return usageErrorf("--format %q: want folded, pprof, json, text, svg or html", *format)
				}
				v, err := profile.ParseValue(*value)
				if err != nil {
					return usageErrorf("--value: %v", err)
				}
				return runStacks(stacksOptions{input: *input, output: *output, span: *span, glob: *glob, format: *format, value: v, depth: *depth, title: *title})
			}
		},
	})
}

type stacksOptions struct {
	input, output, span, format, title string
	glob                               bool
	value                              profile.Value
	depth                              int
}

func runStacks(o stacksOptions) error {
	var in io.Reader = os.Stdin
	if o.input != "-" {
		f, err := os.Open(o.input)
		if err != nil {
			return fmt.Errorf("open input: %w", err)
		}
		defer f.Close()
		in = f
	}
	all, err := profile.Read(in)
	if err != nil {
		return fmt.Errorf("read %s: %w", o.input, err)
	}
	overruns, err := profile.Select(all, o.span, o.glob)
	if err != nil {
		return usageErrorf("--span: %v", err)
	}
	if len(overruns) == 0 {
		if o.span != "" && len(all) > 0 {
			hint := ""
			if !o.glob && strings.ContainsAny(o.span, "*?!") {
				hint = " (--span matches names exactly; add --glob to match it as a glob)"
			}
			return fmt.Errorf("no overruns of span %q in %s%s; it has overruns of: %s", o.span, o.input, hint, spanNames(all))
		}
		return fmt.Errorf("no overruns in %s: spans within their budgets capture no stacks", o.input)
	}
	stacks := profile.Aggregate(overruns)

	var out io.Writer = os.Stdout
	var file *os.File
	if o.output != "-" {
		if file, err = os.Create(o.output); err != nil {
			return fmt.Errorf("create output: %w", err)
		}
		defer file.Close()
		out = file
	}
	title := o.title
	if title == "" {
		title = profile.FlameTitle(o.span, overruns)
	}
	switch o.format {
	case "folded":
		err = profile.WriteFolded(out, stacks, o.value)
	case "json":
		err = profile.WriteJSON(out, o.span, overruns, stacks)
	case "text":
		err = profile.WriteText(out, overruns, stacks, o.depth)
	case "svg":
		err = profile.WriteFlameGraph(out, stacks, profile.FlameOptions{Title: title, Value: o.value})
	case "html":
		err = profile.WriteHTML(out, overruns, stacks, profile.FlameOptions{Title: title, Value: o.value})
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
