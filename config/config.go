package config

import (
	"fmt"
	"io"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"

	"gopkg.in/yaml.v3"

	"github.com/spanwatch/spanwatch/config/section"
	"github.com/spanwatch/spanwatch/internal/memory"
	"github.com/spanwatch/spanwatch/internal/tpsource"
	"github.com/spanwatch/spanwatch/internal/usdt"
	"github.com/spanwatch/spanwatch/metrics"
	"github.com/spanwatch/spanwatch/notify"
	"github.com/spanwatch/spanwatch/otlp"
	"github.com/spanwatch/spanwatch/policy"
	"github.com/spanwatch/spanwatch/source/function"
)

// An Error is one problem in a configuration: the one positioned error
// type every section's decoder reports (defined in config/section, which
// the decoders below this package import).
type Error = section.Error

// ErrorList is every problem Load found, in report order.
type ErrorList = section.ErrorList

// A Config is a configuration file decoded and validated the way the agent
// runs it: every section, each into the type of the package that owns it.
// Load makes one; it is immutable once returned.
type Config struct {
	// Path is the file; empty for a configuration parsed from memory, which
	// is never reloaded.
	Path string
	// Rules holds the budgets, rules, Rego policies, external labels and
	// policy limits.
	Rules *policy.Config
	// Collector is the collector: section, merged with the command line.
	Collector CollectorSettings
	// Notify is the webhooks: and routing: sections; nil when the file has
	// no webhooks: section (no dispatcher runs, no outbox is opened).
	Notify *notify.Config
	// Sources are the USDT span sources of the sources: section.
	Sources []usdt.SpanSource
	// Tracepoints are the user_events: and eventheader: sources of the
	// sources: section, in file order (their place among all tracepoint
	// sources indexes the kernel's map).
	Tracepoints []tpsource.Source
	// Functions are the function span sources of the sources: section.
	Functions []function.Target
	// OTLP is the otlp: section: where overrun records go as OTLP log
	// records; nil when the file has none (a restart applies changes).
	OTLP *otlp.Config
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
	// that set it, e.g. "interval": "--interval", for messages
	// (CollectorFlags.Set makes it).
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

// Files lists every file the configuration was read from: the
// configuration file first (when it came from a file), then each policy's
// Rego and data files. A reload watches them all.
func (c *Config) Files() []string {
	if c.Rules != nil && len(c.Rules.Files) > 0 {
		return c.Rules.Files
	}
	if c.Path != "" {
		return []string{c.Path}
	}
	return nil
}

// Load reads and validates a configuration file the way the agent runs it,
// without loading anything into the kernel: the rules and policies, the
// collector: section (values the kernel would refuse included), the
// sources: section, the webhooks and routing (with the outbox's directory
// and every credentials file they name), external_url, the listener, the
// memory budget's plan, and the command line's values. Every problem is
// reported at once, as an ErrorList with file:line:col positions.
// spanwatch check and spanwatch run both call it. A file without any
// section (empty, or only comments) is refused: write rules: [] to run
// with no rules.
func Load(path string, opts LoadOptions) (*Config, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("load configuration: %w", err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, section.MaxFileBytes+1))
	if err != nil {
		return nil, fmt.Errorf("load configuration: %w", err)
	}
	if root, perr := section.ParseDocument(path, data); perr == nil && (root == nil || root.Kind == yaml.MappingNode && len(root.Content) == 0) {
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
	d := section.NewDecoder(name, data)
	dir := opts.Dir
	if dir == "" && opts.FS == nil {
		dir = filepath.Dir(name)
	}
	l := &loader{
		d: d, opts: opts, dir: dir, errs: map[string]int{},
		cfg:   &Config{opts: opts},
		rules: policy.NewSections(d, policy.Options{Dir: opts.Dir, FS: opts.FS}),
	}
	root, perr := section.ParseDocument(name, data)
	if perr != nil {
		d.Add(perr)
	} else if root != nil {
		d.Fields(root, "rule file", sectionKeys(), func(key string, _, v *yaml.Node) {
			before := d.Len()
			l.seen = append(l.seen, key)
			sectionOf(key).decode(l, v)
			l.errs[key] += d.Len() - before
		})
	}
	l.finish()
	if len(d.Errors()) > 0 {
		return nil, d.Errors().Sorted(name)
	}
	return l.cfg, nil
}

// A topSection is one top-level key of the file and its decoder, which
// hands the key's value to the package that owns the section. What needs
// more than one section (the notifier's two, the memory plan, the kernel's
// limits on budgets and sources) is checked once every section decoded
// (loader.finish).
type topSection struct {
	key    string
	decode func(l *loader, v *yaml.Node)
}

// sections are the file's top-level sections, in the order its
// documentation and messages list them. A section is one line here.
var sections = []topSection{
	{"budgets", func(l *loader, v *yaml.Node) { l.rules.Decode("budgets", v) }},
	{"rules", func(l *loader, v *yaml.Node) { l.rules.Decode("rules", v) }},
	{"policies", func(l *loader, v *yaml.Node) { l.rules.Decode("policies", v) }},
	{"external_labels", func(l *loader, v *yaml.Node) { l.rules.Decode("external_labels", v) }},
	{"webhooks", func(l *loader, v *yaml.Node) { l.webhooks = v }},
	{"routing", func(l *loader, v *yaml.Node) { l.routing = v }},
	{"sources", (*loader).sources},
	{"collector", func(l *loader, v *yaml.Node) { l.collector = collectorSettings.decode(l.d, v, CollectorSettings{}) }},
	{"external_url", (*loader).externalURL},
	{"metrics", func(l *loader, v *yaml.Node) { l.cfg.Metrics = metrics.Decode(l.d, v) }},
	{"otlp", func(l *loader, v *yaml.Node) { l.cfg.OTLP = otlp.Decode(l.d, v) }},
	{"listener", func(l *loader, v *yaml.Node) { l.listener = decodeListener(l.d, v, l.dir) }},
	{"policy_limits", func(l *loader, v *yaml.Node) { l.rules.Decode("policy_limits", v) }},
}

// sourceSections are the lists of the sources: section, one per kind of
// source, each decoded by the package that owns the source. A new kind of
// source is one line here.
var sourceSections = []topSection{
	{"usdt", func(l *loader, v *yaml.Node) { l.cfg.Sources = append(l.cfg.Sources, usdt.DecodeSources(l.d, v)...) }},
	{"user_events", func(l *loader, v *yaml.Node) {
		l.cfg.Tracepoints = append(l.cfg.Tracepoints, tpsource.DecodeSources(l.d, tpsource.UserEvents, v)...)
	}},
	{"eventheader", func(l *loader, v *yaml.Node) {
		l.cfg.Tracepoints = append(l.cfg.Tracepoints, tpsource.DecodeSources(l.d, tpsource.EventHeader, v)...)
	}},
	{"functions", func(l *loader, v *yaml.Node) {
		l.cfg.Functions = append(l.cfg.Functions, function.DecodeSources(l.d, v)...)
	}},
}

func sectionKeys() []string {
	out := make([]string, len(sections))
	for i, s := range sections {
		out[i] = s.key
	}
	return out
}

func sectionOf(key string) topSection {
	for _, s := range sections {
		if s.key == key {
			return s
		}
	}
	panic("config: no section " + key)
}

// A loader holds what the sections decoded until finish puts it together.
type loader struct {
	d    *section.Decoder
	opts LoadOptions
	dir  string // where relative paths of the listener are taken from
	cfg  *Config
	seen []string       // the sections the file has, in file order
	errs map[string]int // errors reported while each section decoded

	rules             *policy.Sections
	webhooks, routing *yaml.Node
	collector         decoded[CollectorSettings]
	listener          decoded[ListenerSettings]
	externalURLValue  string
	sourcesSeen       bool
}

func (l *loader) has(key string) bool {
	for _, k := range l.seen {
		if k == key {
			return true
		}
	}
	return false
}

// sources walks the sources: section, handing each list to its decoder.
func (l *loader) sources(n *yaml.Node) {
	l.sourcesSeen = true
	d := l.d
	if section.IsNull(n) {
		return
	}
	keys := make([]string, len(sourceSections))
	for i, s := range sourceSections {
		keys[i] = s.key
	}
	if n.Kind != yaml.MappingNode {
		d.Errorf(n, "sources must be a mapping")
		return
	}
	seen := map[string]bool{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k := section.Resolve(n.Content[i])
		if k.Kind != yaml.ScalarNode {
			d.Errorf(k, "sources: keys must be strings")
			continue
		}
		var src *topSection
		for j := range sourceSections {
			if sourceSections[j].key == k.Value {
				src = &sourceSections[j]
			}
		}
		if src == nil {
			d.Errorf(k, "sources: unknown key %q (known: %s)%s", k.Value, joinKeys(keys), didYouMean(k.Value, keys))
			continue
		}
		if seen[k.Value] {
			d.Errorf(k, "sources: %s given twice", k.Value)
			continue
		}
		seen[k.Value] = true
		src.decode(l, n.Content[i+1])
	}
}

// externalURL decodes external_url: a URL such as
// http://node1.example:9464.
func (l *loader) externalURL(n *yaml.Node) {
	if n.Kind != yaml.ScalarNode || n.ShortTag() != "!!str" {
		l.d.Errorf(n, "external_url must be a URL such as http://node1.example:9464, not %s", section.KindName(n))
	} else if err := checkExternalURL(n.Value); err != nil {
		l.d.Errorf(n, "external_url: %v", err)
	} else {
		l.externalURLValue = n.Value
	}
}

// finish checks what needs more than one section, or the command line,
// and puts the Config together.
func (l *loader) finish() {
	d, cfg, opts := l.d, l.cfg, l.opts

	before := d.Len()
	cfg.Rules = l.rules.Finish()
	policyErrs := d.Len() - before
	for _, k := range policy.Keys {
		policyErrs += l.errs[k]
	}
	if cfg.Rules != nil {
		before = d.Len()
		checkBudgets(d, cfg.Rules)
		policyErrs += d.Len() - before
	}

	before = d.Len()
	collectorSettings.checkFlags(d, &opts.Collector, opts.Flags)
	cfg.Collector = collectorSettings.merge(opts.Collector, opts.Flags, l.collector)
	if cfg.Collector.Interval == 0 {
		cfg.Collector.Interval = DefaultInterval
	}
	if policyErrs == 0 && l.errs["collector"] == 0 && d.Len() == before {
		planMemory(d, cfg, l.collector, opts)
	}

	if !l.has("listener") {
		l.listener = decodeListener(d, nil, l.dir)
	}
	checkWebConfig(d, &l.listener, opts.WebConfigFile)
	cfg.Listener = l.listener.values

	if l.sourcesSeen {
		checkSourceLimits(d, cfg.Sources, cfg.Tracepoints)
	}

	// The outbox and the credentials are opened only when webhooks are
	// configured: then their files are checked too.
	if hooks := l.webhooks != nil && l.webhooks.Kind != 0; hooks {
		cfg.Notify = notify.Decode(d, l.webhooks, l.routing, true)
	} else {
		notify.Decode(d, nil, l.routing, false)
	}

	cfg.ExternalURL = opts.ExternalURL
	if cfg.ExternalURL == "" {
		cfg.ExternalURL = l.externalURLValue
	}
	if opts.ExternalURL != "" {
		if err := checkExternalURL(opts.ExternalURL); err != nil {
			d.Flag("--external-url: %v", err)
		}
	}
	if cfg.Notify != nil && cfg.Notify.Routing.ExternalURL == "" {
		// The payload's externalURL says where the sender can be reached:
		// the agent's listener, unless routing: names something else.
		cfg.Notify.Routing.ExternalURL = cfg.ExternalURL
	}
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

// BudgetsOnly returns the configuration with its budgets and collector
// settings alone: no rules, policies or webhooks, and no reloading
// (spanwatch top).
func (c *Config) BudgetsOnly() *Config {
	out := *c
	rules := *c.Rules
	rules.Rules, rules.Policies = nil, nil
	out.Rules, out.Notify, out.Path = &rules, nil, ""
	return &out
}

// Warnings are what the configuration allows but is most likely a
// mistake, each positioned: label and annotation templates that read a
// label their alerts never have (policy.Config.LabelWarnings, with the
// label names the sources: section gives its series). check prints them;
// they do not stop the agent.
func (c *Config) Warnings() ErrorList {
	if c.Rules == nil {
		return nil
	}
	var names []string
	for _, s := range c.Sources {
		for _, l := range s.Labels.List {
			names = append(names, l.Name)
		}
	}
	for _, s := range c.Tracepoints {
		for _, l := range s.Labels.List {
			names = append(names, l.Name)
		}
	}
	return ErrorList(c.Rules.LabelWarnings(names))
}
