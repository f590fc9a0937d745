package policy

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/spanwatch/spanwatch/config/section"
)

// A Config is one decoded and compiled rule file. It is immutable once
// returned, so the detector can share it between goroutines and swap it
// atomically on reload.
type Config struct {
	// Name is the configuration file's name (the path for LoadFile).
	Name string
	// Budgets in file order.
	Budgets  []*Budget
	Rules    []*Rule
	Policies []*Policy

	// Limits bound the policies' evaluation (policy_limits:); zero fields
	// are left to the detector's defaults.
	Limits Limits

	// ExternalLabels are added to every alert (rule, policy and overrun
	// alerts) that does not set the label itself, as Prometheus adds its
	// external labels. A label set to "" removes a default one (the
	// detector adds node: NODE_NAME or the host name unless told
	// otherwise). Nil when the file has no external_labels.
	ExternalLabels map[string]string

	// Files lists every file read from disk: the rule file first (when it
	// came from a file), then each policy's Rego and data files. A
	// reloader watches them all. It is empty when Options.FS was used.
	Files []string

	exactBudgets map[string]*Budget
	globBudgets  []*Budget
}

// A Budget is how long a span may take. The collector pushes budgets into
// BPF; a span slower than its budget captures a stack and raises an
// overrun alert.
type Budget struct {
	// Span is an exact name or a glob.
	Span   *Glob
	Budget time.Duration
	// CaptureStack asks BPF to capture the user stack of a slow span
	// (default true); false sends the overrun without a stack walk.
	CaptureStack bool
	// KernelStack asks BPF to capture the kernel stack too (default
	// false): where a span blocked in the kernel.
	KernelStack bool
	// SampleFromStart samples the span on the CPU from its start rather
	// than from its budget on (default false): the samples of a span that
	// ends over its budget show where its time went before the budget too;
	// those of one that ends within it are dropped. Exact names only.
	SampleFromStart bool
	// Alert raises an alert for each slow span, rate-limited per span
	// (default true).
	Alert bool
	// Labels and Annotations are added to overrun alerts; a label
	// "alertname" replaces the default SpanOverBudget.
	Labels      map[string]*Template
	Annotations map[string]*Template
	Pos         section.Pos
}

// BudgetFor returns the budget of a span name: an exact entry wins over
// globs, and among globs the first in the file wins.
func (c *Config) BudgetFor(span string) (time.Duration, bool) {
	if b := c.BudgetEntry(span); b != nil {
		return b.Budget, true
	}
	return 0, false
}

// BudgetEntry returns the budget entry for a span name, or nil.
func (c *Config) BudgetEntry(span string) *Budget {
	if c == nil {
		return nil
	}
	if b, ok := c.exactBudgets[span]; ok {
		return b
	}
	for _, b := range c.globBudgets {
		if b.Span.Match(span) {
			return b
		}
	}
	return nil
}

// RuleKind says how a rule decides.
type RuleKind string

const (
	KindThreshold RuleKind = "threshold" // when: METRIC OP VALUE
	KindAnomaly   RuleKind = "anomaly"   // anomaly: {metric, sensitivity}
)

// A Rule is one YAML rule.
type Rule struct {
	Name    string
	Kind    RuleKind
	Match   Matcher
	When    *Condition // KindThreshold
	Anomaly *Anomaly   // KindAnomaly
	// Over is the range the rule's metrics are computed over: the counts
	// and histograms of the windows in the range are merged exactly, then
	// the quantiles and ratios taken (0: the newest window alone). It
	// defaults to DefaultOver.
	Over time.Duration
	// For is how long the rule must hold before the alert fires (pending
	// until then); KeepFiringFor keeps a firing alert firing that long
	// after the rule stops holding.
	For           time.Duration
	KeepFiringFor time.Duration
	Labels        map[string]*Template
	Annotations   map[string]*Template
	Pos           section.Pos
}

// Options change how Parse reads referenced files.
type Options struct {
	// Dir is the directory policy and data paths are relative to. It
	// defaults to the directory of the rule file's name.
	Dir string
	// FS, when set, is where referenced files are read from (an embed.FS
	// for a built-in config, say); paths are then slash-separated.
	FS fs.FS
}

// LoadFile reads and parses a rule file; policy and data paths are relative
// to the file's directory.
func LoadFile(name string) (*Config, error) {
	f, err := os.Open(name)
	if err != nil {
		return nil, fmt.Errorf("load rule file: %w", err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, MaxFileBytes+1))
	if err != nil {
		return nil, fmt.Errorf("load rule file: %w", err)
	}
	return Parse(name, data, Options{})
}

// LongestRange is how far back the ranges of the rules and policies
// reach: what the detector keeps of every series' windows.
func (c *Config) LongestRange() time.Duration {
	var keep time.Duration
	for _, r := range c.Rules {
		keep = max(keep, r.Over)
	}
	for _, p := range c.Policies {
		keep = max(keep, p.Over)
	}
	return keep
}

// DefaultOver is the range of a rule or policy that does not set over:.
// A quantile over one window flaps: a 10s window of a service doing 5
// requests a second holds 50 spans, so its p99 is its slowest span, and
// the next window's is another. One minute is six 10s windows (60 with
// the demo's 1s interval), enough spans for a stable p99 at modest
// traffic, and still short enough that an alert resolves within a minute
// of the service recovering. It is the shortest range Prometheus users
// commonly put in rate(...[1m]).
const DefaultOver = time.Minute

// MaxOver bounds a range: the detector keeps every window of the longest
// range in memory.
const MaxOver = time.Hour

// Keys are the top-level sections of the configuration file that policy
// decodes, in the order the file's documentation lists them.
var Keys = []string{"budgets", "rules", "policies", "external_labels", "policy_limits"}

// Parse decodes and compiles the rules of a configuration file held in
// memory: its budgets:, rules:, policies:, external_labels: and
// policy_limits: sections. The file's other top-level keys are left alone:
// package config owns the file, decodes every section and reports unknown
// keys; Parse serves tests and tools that need the rules alone. name is
// used in error messages and, unless opts.Dir is set, to resolve relative
// paths. Every problem found is returned at once as a section.ErrorList.
func Parse(name string, data []byte, opts Options) (*Config, error) {
	root, perr := section.ParseDocument(name, data)
	if perr != nil {
		return nil, section.ErrorList{perr}
	}
	d := section.NewDecoder(name, data)
	s := NewSections(d, opts)
	if root != nil {
		d.Fields(root, "rule file", nil, func(key string, _, v *yaml.Node) {
			if slices.Contains(Keys, key) {
				s.Decode(key, v)
			}
		})
	}
	cfg := s.Finish()
	if err := d.Err(); err != nil {
		return nil, err
	}
	return cfg, nil
}

// Sections decodes policy's sections of one configuration file into a
// Config: Decode once for each section the file has, in file order, then
// Finish. Package config drives it while it decodes the whole file; the
// errors go to the file's section.Decoder.
type Sections struct {
	d           *decoder
	cfg         *Config
	opts        Options
	dir         string
	policyNodes []*yaml.Node
	failed      bool
}

// NewSections returns a Sections decoding into d's file. opts.Dir (else
// the file's directory) is where relative policy and data paths are read
// from.
func NewSections(d *section.Decoder, opts Options) *Sections {
	s := &Sections{d: &decoder{d}, opts: opts, cfg: &Config{Name: d.File, exactBudgets: map[string]*Budget{}}}
	if opts.FS == nil {
		s.cfg.Files = append(s.cfg.Files, d.File)
	}
	s.dir = opts.Dir
	if s.dir == "" {
		if opts.FS != nil {
			s.dir = path.Dir(d.File)
		} else {
			s.dir = filepath.Dir(d.File)
		}
	}
	return s
}

// Decode decodes section key (one of Keys), whose value is v.
func (s *Sections) Decode(key string, v *yaml.Node) {
	d, cfg := s.d, s.cfg
	before := d.Len()
	switch key {
	case "budgets":
		for _, n := range d.seq(v, "budgets") {
			if b := d.budget(n); b != nil {
				cfg.Budgets = append(cfg.Budgets, b)
			}
		}
	case "rules":
		names := map[string]*Rule{}
		for _, n := range d.seq(v, "rules") {
			r := d.rule(n)
			if r == nil {
				continue
			}
			if first, dup := names[r.Name]; dup {
				d.errorf(n, "duplicate rule name %q (first defined at line %d)", r.Name, first.Pos.Line)
				continue
			}
			names[r.Name] = r
			cfg.Rules = append(cfg.Rules, r)
		}
	case "policies":
		// Compiled in Finish: the errors of the configuration file come
		// before those of the files it names.
		s.policyNodes = d.seq(v, "policies")
	case "external_labels":
		cfg.ExternalLabels = d.externalLabels(v)
	case "policy_limits":
		cfg.Limits = d.limits(v)
	default:
		panic("policy: Decode of section " + key)
	}
	if d.Len() > before {
		s.failed = true
	}
}

// Finish indexes the budgets and compiles the policies, and returns the
// rules; nil when any of policy's sections had an error.
func (s *Sections) Finish() *Config {
	d, cfg := s.d, s.cfg
	before := d.Len()
	for _, b := range cfg.Budgets {
		if name, ok := b.Span.Exact(); ok {
			if first, dup := cfg.exactBudgets[name]; dup {
				d.errorf(&yaml.Node{Line: b.Pos.Line, Column: b.Pos.Col}, "duplicate budget for span %q (first at line %d)", name, first.Pos.Line)
				continue
			}
			cfg.exactBudgets[name] = b
		} else {
			cfg.globBudgets = append(cfg.globBudgets, b)
		}
	}

	names := map[string]*Policy{}
	rd := &fileReader{dir: s.dir, fsys: s.opts.FS}
	for _, n := range s.policyNodes {
		p := d.policy(n, rd)
		if p == nil {
			continue
		}
		if first, dup := names[p.Name]; dup {
			d.errorf(n, "duplicate policy name %q (first defined at line %d): set name: to tell them apart", p.Name, first.Pos.Line)
			continue
		}
		names[p.Name] = p
		cfg.Policies = append(cfg.Policies, p)
		for _, f := range p.files {
			if s.opts.FS == nil && !slices.Contains(cfg.Files, f) {
				cfg.Files = append(cfg.Files, f)
			}
		}
	}
	if s.failed || d.Len() > before {
		return nil
	}
	return cfg
}

func (d *decoder) pos(n *yaml.Node) section.Pos { return section.At(d.File, n) }

var budgetKeys = []string{"span", "budget", "capture_stack", "kernel_stack", "sample_from_start", "alert", "labels", "annotations"}

func (d *decoder) budget(n *yaml.Node) *Budget {
	b := &Budget{CaptureStack: true, Alert: true, Pos: d.pos(section.Resolve(n))}
	ok := d.Fields(n, "budget", budgetKeys, func(key string, k, v *yaml.Node) {
		switch key {
		case "span":
			b.Span = d.glob(v, "budget span")
		case "budget":
			if dur, ok := d.duration(v, "budget"); ok {
				if dur <= 0 {
					d.errorf(v, "budget must be more than 0")
				}
				b.Budget = dur
			}
		case "capture_stack":
			b.CaptureStack, _ = d.boolean(v, "capture_stack")
		case "kernel_stack":
			b.KernelStack, _ = d.boolean(v, "kernel_stack")
		case "sample_from_start":
			b.SampleFromStart, _ = d.boolean(v, "sample_from_start")
		case "alert":
			b.Alert, _ = d.boolean(v, "alert")
		case "labels":
			b.Labels = d.templates(v, "labels", true)
		case "annotations":
			b.Annotations = d.templates(v, "annotations", false)
		}
	})
	if !ok {
		return nil
	}
	rn := section.Resolve(n)
	if b.Span == nil && !hasKey(rn, "span") {
		d.errorf(rn, "budget: missing span (an exact span name or a glob)")
		return nil
	}
	if b.Budget == 0 && !hasKey(rn, "budget") {
		d.errorf(rn, "budget: missing budget (a duration like 250ms)")
		return nil
	}
	if b.Span == nil {
		return nil
	}
	return b
}

func hasKey(n *yaml.Node, key string) bool {
	n = section.Resolve(n)
	if n.Kind != yaml.MappingNode {
		return false
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		if section.Resolve(n.Content[i]).Value == key {
			return true
		}
	}
	return false
}

var ruleKeys = []string{"name", "span", "metric", "cgroup", "container", "container_id", "namespace", "pod", "pod_uid", "unit", "process", "service", "match", "when", "anomaly", "over", "for", "keep_firing_for", "labels", "annotations"}

func (d *decoder) rule(n *yaml.Node) *Rule {
	rn := section.Resolve(n)
	r := &Rule{Pos: d.pos(rn), Over: DefaultOver}
	nerr := d.Len()
	ok := d.Fields(n, "rule", ruleKeys, func(key string, k, v *yaml.Node) {
		switch key {
		case "name":
			if s, ok := d.name(v, "rule name"); ok {
				r.Name = s
			}
		case "span":
			r.Match.Span = d.glob(v, "span")
		case "metric":
			r.Match.Metric = d.glob(v, "metric")
		case "match":
			r.Match.Labels = d.labelMatchers(v)
		case "cgroup":
			r.Match.Cgroup = d.glob(v, "cgroup")
		case "container":
			r.Match.Container = d.glob(v, "container")
		case "pod":
			r.Match.Pod = d.glob(v, "pod")
		case "container_id":
			r.Match.ContainerID = d.glob(v, "container_id")
		case "pod_uid":
			r.Match.PodUID = d.glob(v, "pod_uid")
		case "namespace":
			r.Match.Namespace = d.glob(v, "namespace")
		case "unit":
			r.Match.Unit = d.glob(v, "unit")
		case "process":
			r.Match.Process = d.glob(v, "process")
		case "service":
			r.Match.Service = d.glob(v, "service")
		case "when":
			if s, ok := d.name(v, "when"); ok {
				parse := ParseCondition
				if hasKey(rn, "metric") {
					parse = parseValueCondition // values, not durations
				}
				c, err := parse(s)
				if err != nil {
					var ce *ConditionError
					if errors.As(err, &ce) {
						d.ErrorAt(v, ce.Offset, "when: %s", ce.Msg)
					} else {
						d.errorf(v, "when: %v", err)
					}
					return
				}
				r.When = c
				r.Kind = KindThreshold
			}
		case "anomaly":
			r.Anomaly = d.anomaly(v)
		case "over":
			r.Over = d.over(v)
		case "for":
			r.For, _ = d.duration(v, "for")
		case "keep_firing_for":
			r.KeepFiringFor, _ = d.duration(v, "keep_firing_for")
		case "labels":
			r.Labels = d.templates(v, "labels", true, "alertname")
		case "annotations":
			r.Annotations = d.templates(v, "annotations", false)
		}
	})
	if !ok {
		return nil
	}
	if r.Name == "" {
		if !hasKey(rn, "name") {
			d.errorf(rn, "rule: missing name")
		}
		return nil
	}
	if hasKey(rn, "span") && hasKey(rn, "metric") {
		d.errorf(rn, "rule %q: has both span and metric: a rule watches spans or an argument metric", r.Name)
	}
	hasWhen, hasAnomaly := hasKey(rn, "when"), hasKey(rn, "anomaly")
	switch {
	case hasWhen && hasAnomaly:
		d.errorf(rn, "rule %q: has both when and anomaly: a rule is one or the other", r.Name)
	case !hasWhen && !hasAnomaly:
		d.errorf(rn, "rule %q: needs when (e.g. p99 > 200ms) or anomaly (e.g. {metric: p99, sensitivity: 3})", r.Name)
	case hasAnomaly && r.Anomaly != nil:
		r.Kind = KindAnomaly
	}
	if d.Len() > nerr {
		return nil
	}
	return r
}

var anomalyKeys = []string{"metric", "sensitivity", "warmup", "alpha", "direction", "min_count"}

func (d *decoder) anomaly(n *yaml.Node) *Anomaly {
	a := &Anomaly{Sensitivity: 3, Warmup: DefaultWarmup, Alpha: DefaultAlpha, Direction: DirectionUp}
	nerr := d.Len()
	minCountSet := false
	ok := d.Fields(n, "anomaly", anomalyKeys, func(key string, k, v *yaml.Node) {
		switch key {
		case "metric":
			if s, ok := d.name(v, "anomaly metric"); ok {
				if !Metric(s).valid() {
					d.errorf(v, "anomaly: unknown metric %q: want one of %s", s, metricList())
					return
				}
				a.Metric = Metric(s)
			}
		case "sensitivity":
			if f, ok := d.number(v, "sensitivity"); ok {
				if f <= 0 {
					d.errorf(v, "sensitivity must be more than 0 (deviations from the baseline; 3 is a good start)")
					return
				}
				a.Sensitivity = f
			}
		case "warmup":
			if i, ok := d.integer(v, "warmup"); ok {
				if i < 1 || i > 100000 {
					d.errorf(v, "warmup must be between 1 and 100000 windows")
					return
				}
				a.Warmup = int(i)
			}
		case "alpha":
			if f, ok := d.number(v, "alpha"); ok {
				if f <= 0 || f > 1 {
					d.errorf(v, "alpha must be in (0, 1]: the weight of the newest window in the baseline")
					return
				}
				a.Alpha = f
			}
		case "direction":
			if s, ok := d.name(v, "direction"); ok {
				switch Direction(s) {
				case DirectionUp, DirectionDown, DirectionBoth:
					a.Direction = Direction(s)
				default:
					d.errorf(v, "direction must be up, down or both, not %q", s)
				}
			}
		case "min_count":
			if i, ok := d.integer(v, "min_count"); ok {
				if i < 0 {
					d.errorf(v, "min_count must not be negative")
					return
				}
				a.MinCount = uint64(i)
				minCountSet = true
			}
		}
	})
	if !ok || d.Len() > nerr {
		return nil
	}
	if a.Metric == "" {
		d.errorf(section.Resolve(n), "anomaly: missing metric (one of %s)", metricList())
		return nil
	}
	if !minCountSet && a.Metric.IsLatency() {
		// A latency quantile over an empty window is 0, not a fact about
		// the service: skip such windows.
		a.MinCount = 1
	}
	return a
}

var policyKeys = []string{"file", "data", "name", "over", "for", "keep_firing_for"}

func (d *decoder) policy(n *yaml.Node, rd *fileReader) *Policy {
	rn := section.Resolve(n)
	spec := policySpec{pos: d.pos(rn), over: DefaultOver}
	nerr := d.Len()
	if rn.Kind == yaml.ScalarNode {
		spec.file, _ = d.name(rn, "policy file")
	} else {
		d.Fields(n, "policy", policyKeys, func(key string, k, v *yaml.Node) {
			switch key {
			case "file":
				spec.file, _ = d.name(v, "policy file")
				spec.fileNode = v
			case "data":
				spec.data = d.strList(v, "policy data")
			case "name":
				spec.name, _ = d.name(v, "policy name")
			case "over":
				spec.over = d.over(v)
			case "for":
				spec.forDur, _ = d.duration(v, "for")
			case "keep_firing_for":
				spec.keepFiringFor, _ = d.duration(v, "keep_firing_for")
			}
		})
		if spec.file == "" && !hasKey(rn, "file") {
			d.errorf(rn, "policy: missing file (a .rego file, relative to the rule file)")
		}
	}
	if d.Len() > nerr || spec.file == "" {
		return nil
	}
	p, errs := compilePolicy(context.Background(), spec, rd)
	if len(errs) > 0 {
		d.Add(errs)
		return nil
	}
	return p
}

// over decodes a range: a duration up to MaxOver; 0 means the newest
// window alone.
func (d *decoder) over(n *yaml.Node) time.Duration {
	v, ok := d.duration(n, "over")
	if !ok {
		return DefaultOver
	}
	if v > MaxOver {
		d.errorf(n, "over: %s is longer than 1h, the longest range: the detector keeps every window of a range in memory", section.Resolve(n).Value)
		return DefaultOver
	}
	return v
}

// externalLabels decodes external_labels: label names to plain strings
// (no templates: they are the same on every alert).
func (d *decoder) externalLabels(n *yaml.Node) map[string]string {
	n = section.Resolve(n)
	if n.Kind == yaml.ScalarNode && n.ShortTag() == "!!null" {
		return map[string]string{}
	}
	out := map[string]string{}
	d.Fields(n, "external_labels", nil, func(key string, k, v *yaml.Node) {
		switch {
		case !labelNameRE.MatchString(key):
			d.errorf(k, "external_labels: bad label name %q: want letters, digits and underscores, not starting with a digit", key)
			return
		case key == "alertname":
			d.errorf(k, "external_labels: alertname is set by each rule, policy and budget, not for all alerts")
			return
		}
		vn := section.Resolve(v)
		if vn.Kind == yaml.ScalarNode && vn.ShortTag() == "!!null" {
			out[key] = "" // key: (nothing) removes a default label, like ""
			return
		}
		if s, ok := d.str(v, "external_labels."+key); ok {
			out[key] = s
		}
	})
	return out
}

// fileReader reads the files a rule file refers to, from disk or from an
// fs.FS.
type fileReader struct {
	dir  string
	fsys fs.FS
}

func (r *fileReader) path(name string) string {
	if r.fsys != nil {
		if path.IsAbs(name) {
			return path.Clean(name[1:])
		}
		return path.Join(r.dir, name)
	}
	if filepath.IsAbs(name) {
		return name
	}
	return filepath.Join(r.dir, name)
}

func (r *fileReader) read(p string) ([]byte, error) {
	var f io.ReadCloser
	var err error
	if r.fsys != nil {
		f, err = r.fsys.Open(p)
	} else {
		f, err = os.Open(p)
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, MaxFileBytes+1))
	if err != nil {
		return nil, err
	}
	if len(data) > MaxFileBytes {
		return nil, fmt.Errorf("larger than %d bytes", MaxFileBytes)
	}
	return data, nil
}

// Expand renders a rule's labels and annotations for one series. The
// labels are the series' labels, alertname (the rule's name) and the rule's
// labels; annotation templates see those final labels.
func (r *Rule) Expand(data *TemplateData) (labels, annotations map[string]string, err error) {
	labels = data.Labels
	if labels == nil {
		labels = map[string]string{}
	}
	labels["alertname"] = r.Name
	data.Labels = labels
	data.Rule = r.Name
	if len(r.Labels) > 0 {
		extra := make(map[string]string, len(r.Labels))
		if err := expandAll(r.Labels, data, extra); err != nil {
			return nil, nil, fmt.Errorf("rule %s: label %w", r.Name, err)
		}
		for k, v := range extra {
			labels[k] = v
		}
	}
	annotations = make(map[string]string, len(r.Annotations))
	if err := expandAll(r.Annotations, data, annotations); err != nil {
		return nil, nil, fmt.Errorf("rule %s: annotation %w", r.Name, err)
	}
	return labels, annotations, nil
}

// ExpandLabels renders an overrun alert's extra labels from its budget
// entry into labels; a nil Budget adds none.
func (b *Budget) ExpandLabels(data *TemplateData, labels map[string]string) error {
	if b == nil || len(b.Labels) == 0 {
		return nil
	}
	data.Labels = labels
	extra := make(map[string]string, len(b.Labels))
	if err := expandAll(b.Labels, data, extra); err != nil {
		return fmt.Errorf("budget %s: label %w", b.Span, err)
	}
	for k, v := range extra {
		labels[k] = v
	}
	return nil
}

// ExpandAnnotations renders an overrun alert's extra annotations from its
// budget entry into annotations; templates see the final labels.
func (b *Budget) ExpandAnnotations(data *TemplateData, labels, annotations map[string]string) error {
	if b == nil || len(b.Annotations) == 0 {
		return nil
	}
	data.Labels = labels
	if err := expandAll(b.Annotations, data, annotations); err != nil {
		return fmt.Errorf("budget %s: annotation %w", b.Span, err)
	}
	return nil
}
