// Command spanwatch watches every process's spans through the kernel,
// aggregates them in eBPF, evaluates rules over the aggregates and delivers
// alerts to webhooks. Run "spanwatch help" for the commands.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"sort"
	"strings"
	"syscall"
)

// A command is one subcommand. Each lives in its own file and registers
// itself in an init function, so the commands that different parts of
// spanwatch bring stay apart.
type command struct {
	name    string
	args    string // argument synopsis, e.g. "[flags] FILE..."; flags may stand anywhere
	summary string // one line for "spanwatch help"
	help    string // paragraphs for "spanwatch CMD --help"
	// flags declares the command's flags on fs and returns the function
	// that runs it with the remaining arguments.
	flags func(fs *flag.FlagSet) func(ctx context.Context, args []string) error
}

var commands = map[string]*command{}

func register(c *command) {
	if _, dup := commands[c.name]; dup {
		panic("spanwatch: command registered twice: " + c.name)
	}
	commands[c.name] = c
}

// errUsage marks an error in how the command was called: exit status 2.
var errUsage = errors.New("usage")

func usageErrorf(format string, a ...any) error {
	return fmt.Errorf("%w: %s", errUsage, fmt.Sprintf(format, a...))
}

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 1 && (args[0] == "--version" || args[0] == "-version") {
		printVersion(stdout)
		return 0
	}
	if len(args) == 0 || args[0] == "help" || args[0] == "-h" || args[0] == "--help" || args[0] == "-help" {
		if len(args) > 1 {
			if c, ok := commands[args[1]]; ok {
				fs := newFlagSet(c, stdout)
				c.flags(fs)
				fs.Usage()
				return 0
			}
		}
		printUsage(stdout)
		if len(args) == 0 {
			return 2
		}
		return 0
	}
	c, ok := commands[args[0]]
	if !ok {
		fmt.Fprintf(stderr, "spanwatch: unknown command %q\n\n", args[0])
		printUsage(stderr)
		return 2
	}
	fs := newFlagSet(c, stderr)
	runFn := c.flags(fs)
	pos, err := parseInterspersed(fs, args[1:])
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := runFn(ctx, pos); err != nil {
		fmt.Fprintf(stderr, "spanwatch %s: %v\n", c.name, err)
		if errors.Is(err, errUsage) {
			fmt.Fprintf(stderr, "run \"spanwatch %s --help\" for usage\n", c.name)
			return 2
		}
		return 1
	}
	return 0
}

// parseInterspersed parses a command's flags wherever they stand among its
// positional arguments, so "probes PATH --filter X" filters rather than
// taking --filter for a second path (the flag package alone stops at the
// first positional argument). "--" ends the flags: what follows it is
// positional, however it starts; "-" alone is positional (standard input).
func parseInterspersed(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		rest := fs.Args()
		if len(rest) == 0 {
			return pos, nil
		}
		if used := len(args) - len(rest); used > 0 && args[used-1] == "--" && !takesValue(fs, args[:used-1]) {
			return append(pos, rest...), nil
		}
		pos = append(pos, rest[0])
		args = rest[1:]
	}
}

// takesValue says whether the last of args is a flag that takes the next
// argument as its value ("--filter --" filters by "--").
func takesValue(fs *flag.FlagSet, args []string) bool {
	if len(args) == 0 {
		return false
	}
	a := args[len(args)-1]
	if len(a) < 2 || a[0] != '-' || strings.Contains(a, "=") {
		return false
	}
	f := fs.Lookup(strings.TrimLeft(a, "-"))
	if f == nil {
		return false
	}
	b, ok := f.Value.(interface{ IsBoolFlag() bool })
	return !ok || !b.IsBoolFlag()
}

func newFlagSet(c *command, out io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet("spanwatch "+c.name, flag.ContinueOnError)
	fs.SetOutput(out)
	fs.Usage = func() {
		fmt.Fprintf(out, "Usage: spanwatch %s %s\n\n%s\n", c.name, c.args, c.summary)
		if c.help != "" {
			fmt.Fprintf(out, "\n%s\n", strings.TrimSpace(c.help))
		}
		n := 0
		fs.VisitAll(func(*flag.Flag) { n++ })
		if n > 0 {
			fmt.Fprintf(out, "\nFlags:\n")
			fs.PrintDefaults()
		}
	}
	return fs
}

func printUsage(w io.Writer) {
	fmt.Fprintf(w, `spanwatch finds slow spans in every process on the host: applications emit
span events (user_events, USDT probes, or the Go SDK's fallback marker), eBPF
aggregates them in the kernel and captures the stack of a span slower than its
budget, and rules (YAML or Rego) decide when to alert a webhook.

Usage: spanwatch COMMAND [flags] [args]

Commands:
`)
	defer fmt.Fprintf(w, "\nspanwatch --version prints the version.\n")
	names := make([]string, 0, len(commands))
	for n := range commands {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(w, "  %-10s %s\n", n, commands[n].summary)
	}
	fmt.Fprintf(w, "\nRun \"spanwatch COMMAND --help\" for a command's flags and examples.\n")
}
