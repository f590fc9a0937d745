package agent

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/spanwatch/spanwatch/internal/memory"
	"github.com/spanwatch/spanwatch/internal/tpsource"
	"github.com/spanwatch/spanwatch/internal/usdt"
	"github.com/spanwatch/spanwatch/metrics"
	"github.com/spanwatch/spanwatch/notify"
	"github.com/spanwatch/spanwatch/policy"
)

// A Config is a configuration file decoded and validated the way the agent
// runs it: every section, including those other packages own. Load makes
// one; it is immutable once returned.
type Config struct {
	// Path is the file; empty for a configuration parsed from memory, which
	// is never reloaded.
	Path string
	// Rules holds the budgets, rules and Rego policies, and the raw
	// sections.
	Rules *policy.Config
	// Collector is the collector: section, merged with the command line.
	Collector CollectorSettings
	// Notify is the webhooks: and routing: sections; nil when the file has
	// no webhooks: section (no dispatcher runs, no outbox is opened).
	Notify *notify.Config
	// Sources are the USDT span sources of the sources: section.
	Sources []usdt.SpanSource
	// Tracepoints are the user_events: and eventheader: sources of the
	// sources: section.
	Tracepoints []tpsource.Source
	// Metrics is the metrics: section: the exporter's classic buckets,
	// native histograms and series TTL (a restart applies changes).
	Metrics metrics.Config
	// ExternalURL is the agent's listener as seen from outside (from the
	// command line, else the file's external_url:); empty when neither
	// sets it. Alerts link to it in their generatorURL.
	ExternalURL string
	// Memory is how the memory budget is divided (internal/memory): the
	// series capacity the collector gets when the file and the command
	// line do not set it, the range history's bound, Go's soft limit.
	Memory memory.Plan
	// Listener is the listener: section, with --web.config.file: TLS and
	// authentication, and the listener's limits (a restart applies
	// changes).
	Listener ListenerSettings

	opts LoadOptions
}

// LoadOptions are what the command line adds to a configuration file.
type LoadOptions struct {
	// Collector holds the defaults and the command line's values of the
	// collector: settings. The file's values replace the defaults; the
	// keys named in Flags keep the command line's. Binaries add up.
	Collector CollectorSettings
	// Flags maps each collector: key the command line set to the flag
	// that set it, e.g. "interval": "--interval", for messages.
	Flags map[string]string
	// ExternalURL, when set, replaces the file's external_url:.
	ExternalURL string
	// WebConfigFile, when set, replaces the file's
	// listener.web_config_file (--web.config.file).
	WebConfigFile string
	// Dir and FS are as in policy.Options, for configurations that do not
	// come from a file of their own (the demo's built-in one).
	Dir string
	FS  fs.FS
	// MemoryEnv is where the memory budget's cgroup limit is read (the
	// zero value: this system's /proc/self).
	MemoryEnv memory.Env
}

// Load reads and validates a configuration file the way the agent runs it,
// without loading anything into the kernel: the rules and policies, the
// collector: section (values the kernel would refuse included), the
// sources: section, the webhooks and routing (with the outbox's directory
// and every credentials file they name), external_url, and the command
// line's values. Every problem is reported at once, as an ErrorList with
// file:line:col positions. spanwatch check and spanwatch run both call it.
// A file without any section (empty, or only comments) is refused: write
// rules: [] to run with no rules.
func Load(path string, opts LoadOptions) (*Config, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("load configuration: %w", err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, policy.MaxFileBytes+1))
	if err != nil {
		return nil, fmt.Errorf("load configuration: %w", err)
	}
	if noSections(data) {
		// On purpose: an editor or a deploy that truncates the file and
		// writes it again gives a reload an empty file now and then. Taken
		// as it is, it would drop every rule, budget and webhook, and end
		// every alert without a word.
		return nil, ErrorList{{File: path, Line: 1, Col: 1, Msg: "the file has no sections: spanwatch does not run an empty configuration file (one caught half-written would silence every alert); to run without rules, say so: rules: []"}}
	}
	cfg, err := Parse(path, data, opts)
	if cfg != nil {
		cfg.Path = path
	}
	return cfg, err
}

// Parse is Load for a configuration held in memory; name is used in
// messages and, unless opts.Dir is set, to resolve relative paths. The
// result's Path is empty: it is not reloaded.
func Parse(name string, data []byte, opts LoadOptions) (*Config, error) {
	ec := &errorCollector{file: name}
	rules, err := policy.Parse(name, data, policy.Options{Dir: opts.Dir, FS: opts.FS})
	var sec sections
	if err == nil {
		checkBudgets(ec, rules)
		sec = sections{webhooks: &rules.Webhooks, routing: &rules.Routing, sources: &rules.Sources, collector: &rules.Collector, externalURL: &rules.ExternalURL, metrics: &rules.Metrics, listener: &rules.Listener}
	} else {
		ec.add(err)
		// The rules are broken; the other sections are still checked, so
		// that one run of check reports everything.
		sec = splitSections(data)
	}
	cfg := &Config{Rules: rules, opts: opts}

	file := decodeCollector(ec, sec.collector)
	checkFlags(ec, opts.Collector, opts.Flags)
	cfg.Collector = merge(opts.Collector, opts.Flags, file)
	if len(ec.errs) == 0 {
		planMemory(ec, cfg, file, opts)
	}

	if sec.metrics != nil {
		mcfg, err := metrics.ParseConfig(name, deref(sec.metrics))
		ec.add(err)
		cfg.Metrics = mcfg
	}

	dir := opts.Dir
	if dir == "" && opts.FS == nil {
		dir = filepath.Dir(name)
	}
	cfg.Listener = decodeListener(ec, sec.listener, dir, opts.WebConfigFile)

	if sec.sources != nil && sec.sources.Kind != 0 {
		srcs, err := usdt.ParseSources(name, sec.sources)
		ec.add(err)
		cfg.Sources = srcs
		tps, err := tpsource.ParseSources(name, sec.sources)
		ec.add(err)
		cfg.Tracepoints = tps
		checkSourceLimits(ec, srcs, tps)
	}

	if sec.webhooks != nil && sec.webhooks.Kind != 0 {
		// The outbox and the credentials are opened only when webhooks
		// are configured: then their files are checked too.
		ncfg, err := notify.ParseConfigWithFiles(name, sec.webhooks, sec.routing)
		ec.add(err)
		cfg.Notify = ncfg
	} else {
		_, err := notify.ParseConfig(name, sec.webhooks, sec.routing)
		ec.add(err)
	}

	cfg.ExternalURL = opts.ExternalURL
	if sec.externalURL != nil && sec.externalURL.Kind != 0 {
		n := deref(sec.externalURL)
		if n.Kind != yaml.ScalarNode || n.Tag != "!!str" {
			ec.at(n.Line, n.Column, "external_url must be a URL such as http://node1.example:9464, not %s", kindName(n))
		} else if err := checkExternalURL(n.Value); err != nil {
			ec.at(n.Line, n.Column, "external_url: %v", err)
		} else if cfg.ExternalURL == "" {
			cfg.ExternalURL = n.Value
		}
	}
	if opts.ExternalURL != "" {
		if err := checkExternalURL(opts.ExternalURL); err != nil {
			ec.flag("--external-url: %v", err)
		}
	}
	if cfg.Notify != nil && cfg.Notify.Routing.ExternalURL == "" {
		// The payload's externalURL says where the sender can be reached:
		// the agent's listener, unless routing: names something else.
		cfg.Notify.Routing.ExternalURL = cfg.ExternalURL
	}

	if err := ec.list(); err != nil {
		return nil, err
	}
	return cfg, nil
}

// noSections reports whether data is a YAML document without any
// top-level key: empty, only comments, null, or {}. A file that does not
// parse is policy's to report.
func noSections(data []byte) bool {
	var doc yaml.Node
	if err := yaml.NewDecoder(bytes.NewReader(data)).Decode(&doc); err != nil {
		return errors.Is(err, io.EOF)
	}
	if doc.Kind != yaml.DocumentNode || len(doc.Content) != 1 {
		return doc.Kind == 0
	}
	top := deref(doc.Content[0])
	switch {
	case top.Kind == yaml.ScalarNode && top.Tag == "!!null":
		return true
	case top.Kind == yaml.MappingNode:
		return len(top.Content) == 0
	}
	return false
}

// checkExternalURL accepts an absolute http or https URL, with a path when
// the listener sits behind a proxy under a prefix.
func checkExternalURL(s string) error {
	u, err := url.Parse(s)
	if err != nil {
		return fmt.Errorf("%q is not a URL", s)
	}
	switch {
	case u.Scheme != "http" && u.Scheme != "https":
		return fmt.Errorf("%q: want an http or https URL such as http://node1.example:9464", s)
	case u.Host == "":
		return fmt.Errorf("%q has no host", s)
	case u.RawQuery != "" || u.Fragment != "":
		return fmt.Errorf("%q: a query or fragment cannot be extended with the series' path", s)
	}
	return nil
}

// sections are the top-level sections of a file that policy does not
// decode itself.
type sections struct {
	webhooks, routing, sources, collector, externalURL, metrics, listener *yaml.Node
}

// splitSections finds the sections in a file whose rules did not load.
// It takes the top-level mapping as written (no merge keys): a file broken
// enough that it has none gets no further errors than policy's.
func splitSections(data []byte) sections {
	var sec sections
	var doc yaml.Node
	if err := yaml.NewDecoder(bytes.NewReader(data)).Decode(&doc); err != nil {
		return sec
	}
	if doc.Kind != yaml.DocumentNode || len(doc.Content) != 1 {
		return sec
	}
	top := deref(doc.Content[0])
	if top.Kind != yaml.MappingNode {
		return sec
	}
	seen := map[string]bool{}
	for i := 0; i+1 < len(top.Content); i += 2 {
		k, v := top.Content[i], top.Content[i+1]
		if seen[k.Value] {
			continue // policy reports the duplicate
		}
		seen[k.Value] = true
		switch k.Value {
		case "webhooks":
			sec.webhooks = v
		case "routing":
			sec.routing = v
		case "sources":
			sec.sources = v
		case "collector":
			sec.collector = v
		case "external_url":
			sec.externalURL = v
		case "metrics":
			sec.metrics = v
		case "listener":
			sec.listener = v
		}
	}
	return sec
}

// A RestartChange is a setting that differs between the running agent and
// its configuration file, and that only a restart applies.
type RestartChange struct {
	Key string `json:"key"` // e.g. "collector.max_series"
	// Old is what runs, New what the file says.
	Old string `json:"running"`
	New string `json:"file"`
}

func (c RestartChange) String() string {
	return fmt.Sprintf("%s: %s -> %s", c.Key, c.Old, c.New)
}

// restartChanges lists what differs between the running configuration
// and next that a reload cannot apply: the collector: settings other than
// interval, the USDT sources, the outbox's path, webhooks where none
// ran (no dispatcher was started), and no webhooks where some ran.
func restartChanges(running, next *Config) []RestartChange {
	var out []RestartChange
	a, b := running.Collector, next.Collector
	field := func(key string, x, y any) {
		if !reflect.DeepEqual(x, y) {
			out = append(out, RestartChange{Key: "collector." + key, Old: show(x), New: show(y)})
		}
	}
	field("sources", a.Sources, b.Sources)
	field("binaries", a.Binaries, b.Binaries)
	field("max_series", a.MaxSeries, b.MaxSeries)
	field("histogram_cells", a.HistogramCells, b.HistogramCells)
	field("series_quota", a.SeriesQuota, b.SeriesQuota)
	field("ringbuf_bytes", a.RingbufBytes, b.RingbufBytes)
	field("overrun_queue", a.OverrunQueue, b.OverrunQueue)
	field("force_kprobe", a.ForceKprobe, b.ForceKprobe)
	field("no_uprobe_multi", a.NoUprobeMulti, b.NoUprobeMulti)
	field("scan_interval", a.ScanInterval, b.ScanInterval)
	field("memory_budget", a.MemoryBudget, b.MemoryBudget)
	for _, m := range []struct {
		key  string
		x, y any
	}{
		{"buckets", running.Metrics.Bounds, next.Metrics.Bounds},
		{"native_histograms", !running.Metrics.NoNativeHistograms, !next.Metrics.NoNativeHistograms},
		{"series_ttl", running.Metrics.SeriesTTL, next.Metrics.SeriesTTL},
	} {
		if !reflect.DeepEqual(m.x, m.y) {
			out = append(out, RestartChange{Key: "metrics." + m.key, Old: show(m.x), New: show(m.y)})
		}
	}
	for _, l := range []struct {
		key  string
		x, y any
	}{
		{"web_config_file", running.Listener.WebConfigFile, next.Listener.WebConfigFile},
		{"max_in_flight", running.Listener.MaxInFlight, next.Listener.MaxInFlight},
		{"write_timeout", running.Listener.WriteTimeout, next.Listener.WriteTimeout},
		{"kernel_addresses", running.Listener.KernelAddresses, next.Listener.KernelAddresses},
	} {
		if !reflect.DeepEqual(l.x, l.y) {
			out = append(out, RestartChange{Key: "listener." + l.key, Old: show(l.x), New: show(l.y)})
		}
	}
	if !sameSources(running.Sources, next.Sources) || !sameTracepoints(running.Tracepoints, next.Tracepoints) {
		out = append(out, RestartChange{Key: "sources",
			Old: describeSources(running.Sources, running.Tracepoints), New: describeSources(next.Sources, next.Tracepoints)})
	}
	switch {
	case running.Notify == nil && next.Notify != nil:
		out = append(out, RestartChange{Key: "webhooks", Old: "none", New: fmt.Sprintf("%d webhooks", len(next.Notify.Webhooks))})
	case running.Notify != nil && next.Notify == nil:
		// The section is gone: the running webhooks keep delivering (the
		// alerts they hold, and the resolved notifications of those that
		// fire now) until a restart. A file truncated by an editor does
		// not silence every alert.
		out = append(out, RestartChange{Key: "webhooks", Old: fmt.Sprintf("%d webhooks", len(running.Notify.Webhooks)), New: "none"})
	case running.Notify != nil && next.Notify != nil && running.Notify.Routing.Outbox.Path != next.Notify.Routing.Outbox.Path:
		out = append(out, RestartChange{Key: "routing.outbox.path", Old: running.Notify.Routing.Outbox.Path, New: next.Notify.Routing.Outbox.Path})
	}
	return out
}

// keepRunning returns next with the settings of changes taken from
// running: what a reload applies when some of the file needs a restart.
func keepRunning(running, next *Config, changes []RestartChange) *Config {
	if len(changes) == 0 {
		return next
	}
	out := *next
	interval := out.Collector.Interval
	out.Collector = running.Collector
	out.Collector.Interval = interval
	out.Sources = running.Sources
	out.Tracepoints = running.Tracepoints
	out.Metrics = running.Metrics
	out.Listener = running.Listener
	switch {
	case running.Notify == nil:
		out.Notify = nil
	case next.Notify == nil:
		out.Notify = running.Notify
	default:
		n := *next.Notify
		n.Routing.Outbox.Path = running.Notify.Routing.Outbox.Path
		out.Notify = &n
	}
	return &out
}

func show(v any) string {
	switch x := v.(type) {
	case []string:
		if len(x) == 0 {
			return "[]"
		}
		return "[" + strings.Join(x, ", ") + "]"
	case uint32:
		if x == 0 {
			return "default"
		}
	}
	return fmt.Sprint(v)
}

func sameSources(a, b []usdt.SpanSource) bool {
	return slices.EqualFunc(a, b, func(x, y usdt.SpanSource) bool {
		x.Pos, y.Pos = "", "" // moving a source in the file changes nothing
		return reflect.DeepEqual(x, y)
	})
}

func sameTracepoints(a, b []tpsource.Source) bool {
	return slices.EqualFunc(a, b, func(x, y tpsource.Source) bool {
		x.Pos, y.Pos = "", ""
		return reflect.DeepEqual(x, y)
	})
}

func describeSources(s []usdt.SpanSource, t []tpsource.Source) string {
	if len(s)+len(t) == 0 {
		return "none"
	}
	var names []string
	for i := range s {
		names = append(names, s[i].Describe())
	}
	for i := range t {
		names = append(names, t[i].Describe())
	}
	return strings.Join(names, "; ")
}

// BudgetsOnly returns the configuration with its budgets and collector
// settings alone: no rules, policies or webhooks, and no reloading
// (spanwatch top).
func (c *Config) BudgetsOnly() *Config {
	out := *c
	rules := *c.Rules
	rules.Rules, rules.Policies = nil, nil
	rules.Webhooks, rules.Routing = yaml.Node{}, yaml.Node{}
	out.Rules, out.Notify, out.Path = &rules, nil, ""
	return &out
}
