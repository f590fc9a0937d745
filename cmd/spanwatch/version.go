package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"runtime"
	"runtime/debug"
)

// version is set by the linker (-X main.version=...) for releases; otherwise
// it comes from the module's build info.
var version = ""

func init() {
	register(&command{
		name:    "version",
		args:    "",
		summary: "print spanwatch's version and build details",
		flags: func(fs *flag.FlagSet) func(context.Context, []string) error {
			return func(ctx context.Context, args []string) error {
				v := version
				rev := ""
				if bi, ok := debug.ReadBuildInfo(); ok {
					if v == "" {
						v = bi.Main.Version
					}
					for _, s := range bi.Settings {
						if s.Key == "vcs.revision" {
							rev = s.Value
						}
					}
				}
				if v == "" {
					v = "(devel)"
				}
				fmt.Fprintf(os.Stdout, "spanwatch %s", v)
				if rev != "" {
					fmt.Fprintf(os.Stdout, " (%s)", rev)
				}
				fmt.Fprintf(os.Stdout, " %s %s/%s\n", runtime.Version(), runtime.GOOS, runtime.GOARCH)
				return nil
			}
		},
	})
}
