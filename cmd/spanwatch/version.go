package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"

	"github.com/spanwatch/spanwatch/internal/buildinfo"
)

func init() {
	register(&command{
		name:    "version",
		args:    "",
		summary: "print spanwatch's version and build details (also: spanwatch --version)",
		help: `
version prints the version stamped at build time, the source revision, the
commit time, and the Go toolchain and platform. "go install
github.com/spanwatch/spanwatch/cmd/spanwatch@v0.2.0" stamps v0.2.0; release
builds stamp theirs with -ldflags (see the README); a build from a git
checkout records a pseudo-version and the commit. /metrics serves the same
as spanwatch_build_info.`,
		flags: func(fs *flag.FlagSet) func(context.Context, []string) error {
			return func(ctx context.Context, args []string) error {
				if len(args) > 0 {
					return usageErrorf("unexpected arguments %q", args)
				}
				printVersion(os.Stdout)
				return nil
			}
		},
	})
}

func printVersion(w io.Writer) { fmt.Fprintln(w, buildinfo.Get()) }
