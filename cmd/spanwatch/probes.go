package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/spanwatch/spanwatch/internal/glob"
	"github.com/spanwatch/spanwatch/internal/usdt"
	"github.com/spanwatch/spanwatch/internal/userfile"
)

func init() {
	register(&command{
		name:    "probes",
		args:    "[flags] PATH... | --pid PID",
		summary: "list the USDT probes of binaries, libraries or a running process",
		help: `
Lists every USDT (systemtap SDT) call site in the given executables or shared
libraries, or, with --pid, in a process's executable and every library it has
mapped (read through /proc/PID/root, so processes in containers work too),
like "bpftrace -l 'usdt:PATH:*'". For each site: provider:name, the call
site's address, its semaphore (when the probe has one: spanwatch raises it
while attached), and its arguments as the compiler wrote them. With -v, the
arguments as spanwatch reads them (size, sign, location).

A site whose arguments spanwatch cannot read is listed with the reason: it
can still be used by a source that reads none of its arguments.

Examples:
  spanwatch probes /usr/sbin/mysqld
  spanwatch probes --pid 4242 --filter 'mysql:query*'
  spanwatch probes --json ./app
`,
		flags: func(fs *flag.FlagSet) func(context.Context, []string) error {
			pid := fs.Int("pid", 0, "list the probes of process `PID` (its executable and mapped libraries)")
			filter := fs.String("filter", "", "only probes whose provider:name matches this `glob` (docs/syntax.md)")
			asJSON := fs.Bool("json", false, "print JSON")
			verbose := fs.Bool("v", false, "show the parsed argument specs")
			return func(ctx context.Context, args []string) error {
				if (*pid == 0) == (len(args) == 0) {
					return usageErrorf("give PATH... or --pid PID")
				}
				var match *glob.Glob
				if *filter != "" {
					var err error
					if match, err = glob.Compile(*filter); err != nil {
						return usageErrorf("bad --filter pattern: %v", err)
					}
				}
				return listProbes(os.Stdout, args, *pid, match, *asJSON, *verbose)
			}
		},
	})
}

// probeListing is one file's probes in the --json output.
type probeListing struct {
	Path   string      `json:"path"`
	Arch   string      `json:"arch,omitempty"`
	Probes []probeSite `json:"probes"`
}

type probeSite struct {
	Provider        string   `json:"provider"`
	Name            string   `json:"name"`
	Address         string   `json:"address"`
	Offset          string   `json:"offset"`
	Semaphore       string   `json:"semaphore,omitempty"`
	SemaphoreOffset string   `json:"semaphore_offset,omitempty"`
	Args            string   `json:"args"`
	Parsed          []string `json:"parsed,omitempty"`
	ArgError        string   `json:"arg_error,omitempty"`
}

func listProbes(w io.Writer, paths []string, pid int, filter *glob.Glob, asJSON, verbose bool) error {
	explicit := pid == 0
	if pid != 0 {
		libs, err := usdt.ProcessFiles("/proc", pid)
		if err != nil {
			return err
		}
		// The executable, by its path through the process's root when it
		// still exists there, else by the exe link; it is mapped too, so
		// it is listed once.
		exe := filepath.Join("/proc", strconv.Itoa(pid), "exe")
		if target, err := os.Readlink(exe); err == nil {
			// Looked up inside the process's root, as it sees it.
			root := filepath.Join("/proc", strconv.Itoa(pid), "root")
			if f, err := userfile.Open(context.Background(), root, target, userfile.Options{Symlinks: true}); err == nil {
				f.Close()
				exe = root + target
			}
		}
		paths = []string{exe}
		for _, l := range libs {
			if l != exe {
				paths = append(paths, l)
			}
		}
	}
	var listings []probeListing
	var errs []error
	for _, p := range paths {
		f, err := usdt.Open(p)
		if err != nil {
			if errors.Is(err, usdt.ErrNoProbes) {
				if explicit {
					errs = append(errs, fmt.Errorf("%s: no USDT probes", p))
				}
				continue
			}
			if explicit {
				errs = append(errs, err)
			}
			continue
		}
		l := probeListing{Path: p, Arch: string(f.Arch)}
		for _, pr := range f.Probes {
			if filter != nil && !filter.Match(pr.FullName()) {
				continue
			}
			s := probeSite{
				Provider: pr.Provider,
				Name:     pr.Name,
				Address:  fmt.Sprintf("%#x", pr.Address),
				Offset:   fmt.Sprintf("%#x", pr.Offset),
				Args:     pr.ArgString,
			}
			if pr.Semaphore != 0 {
				s.Semaphore = fmt.Sprintf("%#x", pr.Semaphore)
				s.SemaphoreOffset = fmt.Sprintf("%#x", pr.SemaphoreOffset)
			}
			if pr.ArgErr != nil {
				s.ArgError = pr.ArgErr.Error()
			}
			for _, a := range pr.Args {
				s.Parsed = append(s.Parsed, a.String())
			}
			l.Probes = append(l.Probes, s)
		}
		if len(l.Probes) > 0 {
			listings = append(listings, l)
		}
	}
	if asJSON {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		if listings == nil {
			listings = []probeListing{}
		}
		if err := enc.Encode(listings); err != nil {
			return err
		}
	} else {
		printProbeListings(w, listings, verbose)
	}
	if len(listings) == 0 && len(errs) == 0 && filter != nil {
		return fmt.Errorf("no probe matches %q", filter)
	}
	if len(listings) == 0 && !explicit && !asJSON {
		// An empty answer says so: the process was read, and has none.
		fmt.Fprintf(w, "process %d: no USDT probes in its executable or its %d mapped libraries\n", pid, len(paths)-1)
	}
	return errors.Join(errs...)
}

func printProbeListings(w io.Writer, listings []probeListing, verbose bool) {
	for i, l := range listings {
		if i > 0 {
			fmt.Fprintln(w)
		}
		fmt.Fprintf(w, "%s (%s, %d sites)\n", l.Path, l.Arch, len(l.Probes))
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "  PROBE\tADDRESS\tSEMAPHORE\tARGS")
		for _, s := range l.Probes {
			sem := "-"
			if s.Semaphore != "" {
				sem = s.Semaphore
			}
			args := s.Args
			if args == "" {
				args = "-"
			}
			if s.ArgError != "" {
				args += "  (unreadable: " + s.ArgError + ")"
			} else if verbose && len(s.Parsed) > 0 {
				args += "  [" + strings.Join(s.Parsed, ", ") + "]"
			}
			fmt.Fprintf(tw, "  %s:%s\t%s\t%s\t%s\n", s.Provider, s.Name, s.Address, sem, args)
		}
		tw.Flush()
	}
}
