package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
	"text/tabwriter"

	"github.com/spanwatch/spanwatch/internal/funcs"
	"github.com/spanwatch/spanwatch/internal/glob"
)

func init() {
	register(&command{
		name:    "functions",
		args:    "[flags] BINARY",
		summary: "list a binary's functions, their return sites, and why one cannot be traced",
		help: `
Lists the functions of an executable or shared library (x86-64 or arm64) and,
for each, where a uprobe would see it enter (its entry's file offset) and
return: the file offset of every return instruction, found by disassembling
it. Probes on the return instructions replace uretprobes, which crash Go
programs.

Functions come from the symbol tables (.symtab, else .dynsym), from a Go
binary's function table (stripped Go binaries keep it), and from .eh_frame
for the functions a stripped C or C++ binary names nowhere (such as static
functions): those are listed unnamed, by address, and --filter matches them
by their address written 0x....

A function that cannot be traced this way is listed with the reason:
  tail_call      a jump out of the function: the callee returns for it
  no_ret         no return instruction (ends in a tail call, or never returns)
  too_many_rets  more return sites than --max-rets
  undecodable    an instruction the disassembler does not know
  zero_size      the symbol table gives it no size
  too_large      larger than 1 MiB
  not_in_file    its code is in no executable segment of the file
Jumps through a register or memory (switch tables, or tail calls through a
pointer) cannot be told apart and are not refused: -v shows their count.
Functions inlined everywhere have no code of their own and are not listed.

Examples:
  spanwatch functions /usr/bin/prometheus --filter 'github.com/prometheus/prometheus/promql.*'
  spanwatch functions --json /usr/lib/postgresql/15/bin/postgres
`,
		flags: func(fs *flag.FlagSet) func(context.Context, []string) error {
			filter := fs.String("filter", "", "only functions whose name or demangled name matches this `glob` (docs/syntax.md)")
			asJSON := fs.Bool("json", false, "print JSON")
			verbose := fs.Bool("v", false, "show each return site's file offset and the indirect jumps")
			maxRets := fs.Int("max-rets", funcs.DefaultMaxRets, "refuse a function with more return sites than `N`")
			return func(ctx context.Context, args []string) error {
				if len(args) != 1 {
					return usageErrorf("give one BINARY")
				}
				if *maxRets < 1 {
					return usageErrorf("--max-rets must be at least 1")
				}
				o := funcs.Options{MaxReturns: *maxRets}
				if *filter != "" {
					var err error
					if o.Filter, err = glob.Compile(*filter); err != nil {
						return usageErrorf("bad --filter pattern: %v", err)
					}
				}
				return listFunctions(ctx, os.Stdout, args[0], o, *asJSON, *verbose)
			}
		},
	})
}

// functionListing is the --json output.
type functionListing struct {
	Path      string         `json:"path"`
	Arch      string         `json:"arch"`
	Go        bool           `json:"go"`
	GoVersion string         `json:"go_version,omitempty"`
	Capped    bool           `json:"capped,omitempty"`
	Functions []functionSite `json:"functions"`
}

type functionSite struct {
	Name          string   `json:"name,omitempty"`
	Demangled     string   `json:"demangled,omitempty"`
	Source        string   `json:"source"`
	Address       string   `json:"address"`
	Size          uint64   `json:"size"`
	Offset        string   `json:"offset"`
	Entry         string   `json:"entry"`
	EntryAfter    string   `json:"entry_after,omitempty"`
	Returns       []string `json:"returns,omitempty"`
	IndirectJumps int      `json:"indirect_jumps,omitempty"`
	Refused       string   `json:"refused,omitempty"`
	Detail        string   `json:"detail,omitempty"`
}

func listFunctions(ctx context.Context, w io.Writer, path string, o funcs.Options, asJSON, verbose bool) error {
	f, err := funcs.Open(ctx, path, o)
	if err != nil {
		return err
	}
	l := functionListing{Path: path, Arch: string(f.Arch), Go: f.Go, GoVersion: f.GoVersion, Capped: f.Capped, Functions: []functionSite{}}
	for _, fn := range f.Funcs {
		s := functionSite{
			Name:          fn.Name,
			Demangled:     fn.Demangled,
			Source:        string(fn.Source),
			Address:       fmt.Sprintf("%#x", fn.Addr),
			Size:          fn.Size,
			Offset:        fmt.Sprintf("%#x", fn.Offset),
			Entry:         fmt.Sprintf("%#x", fn.Entry),
			EntryAfter:    fn.EntryAfter,
			IndirectJumps: fn.IndirectJumps,
			Refused:       string(fn.Refused),
			Detail:        fn.Detail,
		}
		for _, r := range fn.Returns {
			s.Returns = append(s.Returns, fmt.Sprintf("%#x", r))
		}
		l.Functions = append(l.Functions, s)
	}
	if asJSON {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		if err := enc.Encode(l); err != nil {
			return err
		}
	} else {
		printFunctions(w, f, verbose)
	}
	if len(f.Funcs) == 0 && o.Filter != nil {
		return fmt.Errorf("%s: no function matches %q", path, o.Filter)
	}
	return nil
}

func printFunctions(w io.Writer, f *funcs.File, verbose bool) {
	from := "symbol tables and .eh_frame"
	if f.Go {
		from = "Go function table"
		if f.GoVersion != "" {
			from += " of " + f.GoVersion
		}
	}
	reasons := map[funcs.Reason]int{}
	for _, fn := range f.Funcs {
		reasons[fn.Refused]++
	}
	summary := []string{fmt.Sprintf("%d traceable", reasons[""])}
	var refused []string
	for r, n := range reasons {
		if r != "" {
			refused = append(refused, fmt.Sprintf("%d %s", n, r))
		}
	}
	sort.Strings(refused)
	summary = append(summary, refused...)
	noun := "functions"
	if len(f.Funcs) == 1 {
		noun = "function"
	}
	fmt.Fprintf(w, "%s (%s, %s, %d %s: %s)\n", f.Path, f.Arch, from, len(f.Funcs), noun, strings.Join(summary, ", "))
	if f.Capped {
		fmt.Fprintf(w, "  (a table was read only up to its cap: the list is incomplete)\n")
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "  FUNCTION\tADDRESS\tSIZE\tENTRY\tRETS\tSTATUS")
	for _, fn := range f.Funcs {
		status := "ok"
		if fn.EntryAfter == funcs.EntryAfterStackCheck {
			status += fmt.Sprintf(", entry after the stack check (+%d)", fn.Entry-fn.Offset)
		}
		if fn.Refused != "" {
			status = "refused: " + string(fn.Refused)
			if fn.Detail != "" {
				status += ": " + fn.Detail
			}
		} else if verbose {
			offs := make([]string, len(fn.Returns))
			for i, r := range fn.Returns {
				offs[i] = fmt.Sprintf("%#x", r)
			}
			status += "  returns at " + strings.Join(offs, " ")
			if fn.IndirectJumps > 0 {
				status += fmt.Sprintf("  (%d indirect jumps)", fn.IndirectJumps)
			}
		}
		name := fn.DisplayName()
		if fn.Name == "" {
			name += " (unnamed)"
		}
		fmt.Fprintf(tw, "  %s\t%#x\t%d\t%#x\t%d\t%s\n", name, fn.Addr, fn.Size, fn.Entry, len(fn.Returns), status)
	}
	tw.Flush()
}
