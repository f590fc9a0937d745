package main

import (
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
)

// logFlags are the logging flags of the commands that run the agent: -v
// and --log-format.
type logFlags struct {
	verbose bool
	format  string
}

func newLogFlags(fs *flag.FlagSet) *logFlags {
	l := &logFlags{}
	fs.BoolVar(&l.verbose, "v", false, "log debug messages")
	fs.Func("log-format", "log as `text` (the default: key=value lines) or json (one object a line, for log collectors)", func(s string) error {
		if s != "text" && s != "json" {
			return fmt.Errorf("want text or json, not %q", s)
		}
		l.format = s
		return nil
	})
	return l
}

// logger returns the logger the flags ask for, writing to standard error.
func (l *logFlags) logger() *slog.Logger { return l.loggerTo(os.Stderr) }

func (l *logFlags) loggerTo(w io.Writer) *slog.Logger {
	if l == nil {
		l = &logFlags{}
	}
	opts := &slog.HandlerOptions{Level: slog.LevelInfo}
	if l.verbose {
		opts.Level = slog.LevelDebug
	}
	if l.format == "json" {
		return slog.New(slog.NewJSONHandler(w, opts))
	}
	return slog.New(slog.NewTextHandler(w, opts))
}
