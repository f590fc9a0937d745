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
	"time"

	"github.com/spanwatch/spanwatch/internal/funcs"
	"github.com/spanwatch/spanwatch/internal/glob"
	"github.com/spanwatch/spanwatch/internal/userfile"
	"github.com/spanwatch/spanwatch/source/function"
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

A stripped file's separate debug file (Debian's -dbgsym packages) is
looked for as gdb does: by build id, /usr/lib/debug/.build-id/ab/cdef.debug,
then by .gnu_debuglink beside the file, in its .debug directory and under
/usr/lib/debug/DIR, its CRC checked; a file of another build is refused,
and the listing says so. Its .symtab names the functions the file no
longer does; its DWARF gives their parameters. For a path through
/proc/PID/root, it is looked for inside that root.

When the file (or its debug file) carries DWARF (.debug_info; built with -g), each function's
parameters are shown with their types and the argument each is read as
by labels: {NAME: {param: PARAMETER}} (argN.TYPE; {ptr: argN} for a C
char pointer, {ptr: argN, len: argM} for a Go string), or why it cannot
be read (a float, a struct by value, on the stack).

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
	Path      string `json:"path"`
	Arch      string `json:"arch"`
	Go        bool   `json:"go"`
	GoVersion string `json:"go_version,omitempty"`
	Capped    bool   `json:"capped,omitempty"`
	DWARF     bool   `json:"dwarf"`
	// ParamsFrom says where the parameters come from: the file's own
	// DWARF, its separate debug file's (and how it was found), or why
	// none.
	ParamsFrom string `json:"params_from"`
	// DebugFile is the separate debug file read, if any; DebugRefused
	// the ones found and refused, with why.
	DebugFile    string         `json:"debug_file,omitempty"`
	DebugRefused []string       `json:"debug_refused,omitempty"`
	Functions    []functionSite `json:"functions"`
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
	// Params are the parameters DWARF declares (nil: none found).
	Params []functionParam `json:"params,omitempty"`
}

// A functionParam is a parameter, its type, and the operand a label by
// its name reads (Arg), or why none can (Refused).
type functionParam struct {
	Name    string `json:"name"`
	Type    string `json:"type"`
	Arg     string `json:"arg,omitempty"`
	Refused string `json:"refused,omitempty"`
}

// readParams reads the DWARF declarations of b's functions from fh, or
// its separate debug file; nil when it cannot (the listing goes on
// without them).
func readParams(ctx context.Context, fh *userfile.File, b *function.Binary) *function.ParamTable {
	p, err := userfile.Do(ctx, fmt.Sprintf("device %d", fh.Info.Dev), func() (*function.ParamTable, error) { return function.ReadParams(fh, b) }, nil)
	if err != nil {
		return nil
	}
	return p
}

// params lists fn's parameters from p: for C and C++, where each is
// read; for Go, names and types only.
func params(p *function.ParamTable, f *funcs.File, fn *funcs.Func) []functionParam {
	sp := p.Lookup(fn)
	if sp == nil {
		return nil
	}
	var out []functionParam
	for _, pl := range function.PlaceParams(sp, f.Arch) {
		x := functionParam{Name: pl.Name, Type: pl.Type}
		x.Arg, x.Refused = pl.Arg()
		out = append(out, x)
	}
	if out == nil {
		out = []functionParam{}
	}
	return out
}

// listTimeout bounds opening and reading the binary and its debug file.
const listTimeout = 30 * time.Second

func listFunctions(ctx context.Context, w io.Writer, path string, o funcs.Options, asJSON, verbose bool) error {
	ctx, cancel := context.WithTimeout(ctx, listTimeout)
	defer cancel()
	fh, b, err := function.OpenBinary(ctx, path, o)
	if err != nil {
		return err
	}
	defer fh.Close()
	defer b.Close()
	f := b.Funcs
	pt := readParams(ctx, fh, b)
	l := functionListing{Path: path, Arch: string(f.Arch), Go: f.Go, GoVersion: f.GoVersion, Capped: f.Capped, DWARF: pt != nil && !pt.NoDWARF, ParamsFrom: pt.Source(), DebugRefused: b.DebugRefused, Functions: []functionSite{}}
	if b.Debug != nil {
		l.DebugFile = b.Debug.Path
	}
	for i, fn := range f.Funcs {
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
			Params:        params(pt, f, &f.Funcs[i]),
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
		printFunctions(w, b, l, verbose)
	}
	if len(f.Funcs) == 0 && o.Filter != nil {
		return fmt.Errorf("%s: no function matches %q", path, o.Filter)
	}
	return nil
}

func printFunctions(w io.Writer, b *function.Binary, l functionListing, verbose bool) {
	f := b.Funcs
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
	for _, fn := range f.Funcs {
		if fn.Source == funcs.SourceDebugSymtab {
			fmt.Fprintf(w, "  symbols: .symtab of the debug file %s (found by %s)\n", l.DebugFile, b.Debug.By)
			break
		}
	}
	if !l.DWARF {
		fmt.Fprintf(w, "  parameters: unknown, %s; labels name arguments by position, argN\n", l.ParamsFrom)
	} else {
		fmt.Fprintf(w, "  parameters: from %s\n", l.ParamsFrom)
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	head := "  FUNCTION\tADDRESS\tSIZE\tENTRY\tRETS\tSTATUS"
	if l.DWARF {
		head += "\tPARAMETERS"
	}
	fmt.Fprintln(tw, head)
	for i, fn := range f.Funcs {
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
		fmt.Fprintf(tw, "  %s\t%#x\t%d\t%#x\t%d\t%s", name, fn.Addr, fn.Size, fn.Entry, len(fn.Returns), status)
		if l.DWARF {
			fmt.Fprintf(tw, "\t%s", paramText(l.Functions[i].Params))
		}
		fmt.Fprintln(tw)
	}
	tw.Flush()
}

// paramText writes parameters as "(int code: arg0.s32, double x: not
// read)", "-" when DWARF declares none found for the function.
func paramText(ps []functionParam) string {
	if ps == nil {
		return "-"
	}
	parts := make([]string, len(ps))
	for i, p := range ps {
		parts[i] = p.Type + " " + p.Name
		if strings.HasSuffix(p.Type, "*") {
			parts[i] = p.Type + p.Name
		}
		switch {
		case p.Arg != "":
			parts[i] += ": " + p.Arg
		case p.Refused != "":
			parts[i] += ": not read"
		}
	}
	return "(" + strings.Join(parts, ", ") + ")"
}
