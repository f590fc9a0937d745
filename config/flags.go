package config

import (
	"flag"
	"fmt"
	"reflect"
	"strconv"
	"strings"
	"time"

	durationpkg "github.com/spanwatch/spanwatch/internal/duration"
	"github.com/spanwatch/spanwatch/internal/rotate"
)

// collectorDefaults are the collector: settings a command line starts
// from: the settings' defaults where the struct holds them (interval), 0
// for "the collector's, or the memory plan's".
var collectorDefaults = CollectorSettings{Interval: DefaultInterval}

// CollectorFlags are the command-line flags of the collector: settings
// that have one (--interval, --source, --binary, --max-series,
// --memory-budget, --force-kprobe, --no-uprobe-multi), defined from the
// settings' rows: the same names, bounds and checks as the file's keys.
type CollectorFlags struct {
	fs *flag.FlagSet
	s  CollectorSettings
}

// NewCollectorFlags defines the flags on fs.
func NewCollectorFlags(fs *flag.FlagSet) *CollectorFlags {
	f := &CollectorFlags{fs: fs, s: collectorDefaults}
	for _, r := range collectorSettings.rows {
		if r.flag == "" {
			continue
		}
		p := r.field(&f.s)
		usage := r.usage()
		switch r.kind {
		case kindDuration, kindDurationOff:
			durationpkg.Var(fs, p.(*time.Duration), r.flag, *p.(*time.Duration), usage)
		case kindBool:
			fs.BoolVar(p.(*bool), r.flag, *p.(*bool), usage)
		case kindList:
			list := p.(*[]string)
			fs.Func(r.flag, usage, func(s string) error {
				if len(r.words) == 0 {
					*list = append(*list, s)
					return nil
				}
				for _, x := range strings.Split(s, ",") {
					*list = append(*list, strings.TrimSpace(x))
				}
				return nil
			})
		case kindInt, kindSize, kindPath:
			fs.Var(&settingFlag{v: reflect.ValueOf(p).Elem(), kind: r.kind}, r.flag, usage)
		}
	}
	return f
}

// LoadOptions returns the flags' values, naming the keys of those given
// (LoadOptions.Flags).
func (f *CollectorFlags) LoadOptions() LoadOptions {
	flags := map[string]string{}
	f.fs.Visit(func(fl *flag.Flag) {
		for _, r := range collectorSettings.rows {
			if r.flag != "" && r.flag == fl.Name {
				flags[r.key] = "--" + fl.Name
			}
		}
	})
	return LoadOptions{Collector: f.s, Flags: flags}
}

// FlagWords are the values of the collector's flags that take one of a
// few words, by flag name: what shell completion offers.
func FlagWords() map[string][]string {
	out := map[string][]string{}
	for _, r := range collectorSettings.rows {
		if r.flag != "" && len(r.words) > 0 {
			out[r.flag] = r.words
		}
	}
	return out
}

// usage is the row's flag usage: its doc, with the value's name (flag's
// PrintDefaults shows the backquoted word), the words it takes, its
// bounds and default.
func (r *setting[S]) usage() string {
	var notes []string
	if name := r.kind.valueName(); name != "" {
		notes = append(notes, "`"+name+"`")
	}
	switch {
	case r.kind == kindList && len(r.words) > 0:
		notes = append(notes, strings.Join(r.words, ", ")+"; repeat or comma-separate")
	case r.kind == kindList:
		notes = append(notes, "repeatable")
	}
	if b := r.bounds(); b != "" {
		notes = append(notes, b)
	}
	if r.kind != kindBool && r.kind != kindDuration {
		// Durations have their default in the flag (PrintDefaults says
		// it); the others' is 0, standing for what def says.
		notes = append(notes, "default "+r.def)
	}
	if r.kind == kindList && r.accumulate {
		notes = append(notes, "added to the file's")
	}
	if len(notes) == 0 {
		return r.doc
	}
	return r.doc + " (" + strings.Join(notes, "; ") + ")"
}

// settingFlag is a flag.Value for an integer, size or path setting.
type settingFlag struct {
	v    reflect.Value
	kind kind
}

func (f *settingFlag) String() string {
	if !f.v.IsValid() {
		return ""
	}
	if f.kind == kindPath {
		return f.v.String()
	}
	if f.v.CanUint() {
		return strconv.FormatUint(f.v.Uint(), 10)
	}
	return strconv.FormatInt(f.v.Int(), 10)
}

func (f *settingFlag) Set(s string) error {
	switch f.kind {
	case kindPath:
		f.v.SetString(s)
	case kindSize:
		n, err := rotate.ParseSize(s)
		if err != nil {
			return err
		}
		if n <= 0 {
			return fmt.Errorf("must be positive, not %s", s)
		}
		f.v.SetUint(uint64(n))
	default:
		if f.v.CanUint() {
			n, err := strconv.ParseUint(s, 0, f.v.Type().Bits())
			if err != nil {
				return err
			}
			f.v.SetUint(n)
			return nil
		}
		n, err := strconv.ParseInt(s, 0, f.v.Type().Bits())
		if err != nil {
			return err
		}
		f.v.SetInt(n)
	}
	return nil
}

// SetDefault changes the default of the flag of setting key (a command
// whose interval is not the agent's: spanwatch top's 1s): the value the
// settings start from and the one usage shows, without counting the flag
// as given.
func (f *CollectorFlags) SetDefault(key, value string) error {
	r := collectorSettings.row(key)
	if r == nil || r.flag == "" {
		return fmt.Errorf("no flag sets collector.%s", key)
	}
	fl := f.fs.Lookup(r.flag)
	if err := fl.Value.Set(value); err != nil {
		return fmt.Errorf("--%s: %w", r.flag, err)
	}
	fl.DefValue = value
	return nil
}
