package kernel

import (
	"errors"
	"fmt"
	"io"
	"sort"
	"strings"
	"text/tabwriter"

	"github.com/cilium/ebpf"
)

// A Result is one probe's answer.
type Result struct {
	Have    bool
	Unknown bool  // the probe could not tell (as without CAP_BPF)
	Err     error // why not, or why unknown
}

// Probes are the answers of every probe on one kernel.
type Probes struct {
	Release string  // uname -r
	Build   string  // uname -v: a distribution's package version, where it names one
	Version Version // its release numbers (zero when unparsable)
	Results map[Feature]Result
}

// Has reports whether the kernel has f.
func (p *Probes) Has(f Feature) bool { return p.Results[f].Have }

// Expected reports whether the kernel's release is at least the mainline
// release that brought f: a test that needs f fails on such a kernel when
// f is refused, rather than skipping. Distribution kernels may have a
// feature earlier (backports), never later.
func (p *Probes) Expected(f Feature) bool {
	since, ok := f.Since()
	return ok && p.Version != (Version{}) && !p.Version.Less(since)
}

// Core names the BPF objects the collector loads.
type Core string

const (
	// CoreFull is the objects as built: BPF atomics (5.12), bpf_loop
	// (5.17), task storage (5.11), cookies where the kernel has them.
	CoreFull Core = "full"
	// CoreCompat is the objects built with SPANWATCH_COMPAT, for 5.10 to
	// 5.16 (bpf/aggregate.h says what they do instead).
	CoreCompat Core = "compat"
)

// ChooseCore returns the core objects the kernel can load: the full ones
// where it has BPF atomics, bpf_loop and task storage, else the compat
// ones, which need a ring buffer and mmapable arrays (5.8). The error
// says what the kernel lacks when it can run neither.
func (p *Probes) ChooseCore() (Core, error) {
	var missing []string
	for _, f := range []Feature{RingBuf, MmapArray} {
		if r := p.Results[f]; !r.Have && !r.Unknown {
			missing = append(missing, fmt.Sprintf("%s (%s+)", f.What(), info[f].since))
		}
	}
	if len(missing) > 0 {
		return "", fmt.Errorf("%w: this kernel (%s) has no %s; spanwatch needs Linux 5.10 or later", ebpf.ErrNotSupported, p.Release, strings.Join(missing, " or "))
	}
	if p.Has(Atomics) && p.Has(Loop) && p.Has(TaskStorage) {
		return CoreFull, nil
	}
	return CoreCompat, nil
}

// CompatReason says why the compat objects are loaded: what the kernel
// lacks of the full ones' needs.
func (p *Probes) CompatReason() string {
	var lack []string
	for _, f := range []Feature{Atomics, Loop, TaskStorage} {
		if !p.Has(f) {
			lack = append(lack, fmt.Sprintf("%s (%s)", f.What(), info[f].since))
		}
	}
	if len(lack) == 0 {
		return ""
	}
	return "no " + strings.Join(lack, ", no ")
}

// Facts are what the collector and its loaders found and chose on a
// kernel: the probes, the core objects loaded and why.
type Facts struct {
	Probes *Probes
	// Core is the objects loaded; CoreFallback the error of the full
	// objects when the kernel refused them although the probes allowed
	// them (the compat ones were loaded instead).
	Core         Core
	CoreFallback error
}

// State is what a feature of spanwatch gets on a kernel.
type State string

// The states of a Row.
const (
	Works    State = "works"
	Replaced State = "replaced"
	Declined State = "declined"
)

// A Row is one feature of spanwatch on one kernel.
type Row struct {
	// Name says what spanwatch does.
	Name string `json:"name"`
	// State: it works, is replaced by How, or is declined.
	State State `json:"state"`
	// How it is done, or what does it instead, or what happens instead.
	How string `json:"how"`
	// Why: what the kernel lacks (replaced and declined rows).
	Why string `json:"why,omitempty"`
	// Test shows it on the kernels of the matrix ("package TestName",
	// or a subtest, "package TestName/sub"): it passes where the row
	// works or is replaced, and skips where it is declined (a test whose
	// subtests all skipped counts as skipped).
	Test string `json:"test"`
}

// lacks renders why a feature is missing: its probe's error, or the
// release that brought it.
func (p *Probes) lacks(fs ...Feature) string {
	var out []string
	for _, f := range fs {
		if p.Has(f) {
			continue
		}
		r := p.Results[f]
		s := "no " + f.What()
		if since, ok := f.Since(); ok {
			s += " (" + since.String() + ")"
		}
		if r.Unknown {
			s = f.What() + " unknown: " + errString(r.Err)
		}
		out = append(out, s)
	}
	return strings.Join(out, ", ")
}

func errString(err error) string {
	if err == nil {
		return "?"
	}
	return err.Error()
}

// Rows is the table of spanwatch's features on the kernel of f.
func Rows(f Facts) []Row {
	p := f.Probes
	compat := f.Core == CoreCompat
	row := func(name string, ok bool, how, test string) Row {
		st := Works
		if !ok {
			st = Declined
		}
		return Row{Name: name, State: st, How: how, Test: test}
	}
	var rows []Row

	core := Row{Name: "aggregation core", State: Works, How: "full objects: atomics, bpf_loop, task storage", Test: "collector TestCoreExact"}
	if compat {
		core.State, core.How = Replaced, "compat objects (5.10+)"
		core.Why = p.CompatReason()
		if f.CoreFallback != nil {
			core.Why = "the kernel refused the full objects: " + f.CoreFallback.Error()
		}
	}
	rows = append(rows, core)

	exact := Row{Name: "exact counts, sums, errors, histograms", State: Works, How: "atomic adds; histogram cells claimed by compare-and-swap", Test: "collector TestCoreExact"}
	if compat {
		exact.State, exact.How, exact.Why = Replaced, "histogram cells in a hash, claimed by insertion", p.lacks(Atomics)
	}
	rows = append(rows, exact)

	ext := Row{Name: "exact min and max", State: Works, How: "compare-and-swap", Test: "collector TestCoreExact/full"}
	if compat {
		ext.State, ext.How, ext.Why = Declined, "the lowest and highest histogram buckets' bounds (exact for a window of one value)", p.lacks(Atomics)
	}
	rows = append(rows, ext)

	rows = append(rows, row("marker spans (Go SDK without user_events)", p.Has(Uprobes), "a uprobe on the marker's nop", "collector TestMarkerSpansExact"))
	rows = append(rows, row("marker spans (libspanwatch: C, Python, Node.js, Java)", p.Has(Uprobes), "a uprobe on the C marker's nop, in programs and in shared libraries", "collector TestCMarkerSpans"))

	ue := Row{Name: "user_events spans", State: Works, How: "fentry on perf_tp_event", Test: "test/vm/e2e TestSpansOnEachCPU"}
	switch {
	case !p.Has(UserEvents):
		ue.State, ue.How, ue.Why = Declined, "the SDKs use the marker", p.lacks(UserEvents)
	case !p.Has(FentryPerfTp):
		ue.State, ue.How, ue.Why = Replaced, "a kprobe on perf_tp_event", p.lacks(FentryPerfTp)
	}
	rows = append(rows, ue)

	um := Row{Name: "uprobes without CAP_SYS_ADMIN", State: Works, How: "uprobe_multi links", Test: "collector TestMarkerUprobeMethods"}
	if !p.Has(UprobeMulti) {
		um.State, um.How, um.Why = Replaced, "perf uprobes, which need CAP_SYS_ADMIN", p.lacks(UprobeMulti)
	}
	rows = append(rows, um)

	rows = append(rows, row("USDT spans, singles and metrics", p.Has(Uprobes), "uprobes on the probes' nops", "collector TestUSDTSpans"))

	sites := Row{Name: "USDT call sites told apart", State: Works, How: "BPF cookies", Test: "internal/usdt TestArgsInBPF"}
	if !p.Has(AttachCookie) {
		sites.State, sites.How, sites.Why = Replaced, "an address map: executables (PIE too) by code offset, shared libraries with pid:", p.lacks(AttachCookie)
	}
	rows = append(rows, sites)

	nest := Row{Name: "USDT nested pairing by thread", State: Works, How: "a stack per thread in task storage", Test: "collector TestUSDTMetricAndRecursion"}
	if compat {
		nest.State, nest.How, nest.Why = Replaced, "a stack per thread in an LRU hash keyed by thread id", p.lacks(TaskStorage)
	}
	rows = append(rows, nest)

	const agentNames = "read by the agent through /proc/PID/mem; the first spans counted under a placeholder, reported under the name"
	names := Row{Name: "USDT names on pages not yet resident", State: Works, How: "sleepable uprobes: bpf_copy_from_user", Test: "internal/usdt/vmtest TestNamesOnAbsentPages"}
	if p.Has(CopyFromUserStr) {
		names.How = "sleepable uprobes: bpf_copy_from_user_str"
	}
	if compat || !p.Has(SleepableUprobe) {
		names.State, names.How, names.Why = Replaced, agentNames, p.lacks(SleepableUprobe)
	}
	rows = append(rows, names)

	single := Row{Name: "USDT single probes' names on pages not yet resident", State: names.State, How: names.How, Why: names.Why, Test: "collector TestUSDTSpans"}
	if names.State == Works && !p.Has(SleepableQueue) {
		single.State, single.How, single.Why = Replaced, agentNames, p.lacks(SleepableQueue)
	}
	rows = append(rows, single)

	labels := Row{Name: "USDT labels with a cap", State: Works, How: "values admitted with fetch-and-add", Test: "collector TestUSDTService"}
	if compat {
		labels.State, labels.How, labels.Why = Replaced, "the cap may be passed by one value per CPU admitting at the same moment", p.lacks(Atomics)
	}
	rows = append(rows, labels)

	rows = append(rows, Row{Name: "budgets by exact name", State: Works, How: "a hash of budgets, cached per series", Test: "collector TestCoreCaptureFlags"})

	glob := Row{Name: "glob budgets from a name's first span", State: Works, How: "matched in the kernel (bpf_loop)", Test: "collector TestCoreGlobBudgetsFirstSight"}
	if compat {
		glob.State, glob.How, glob.Why = Replaced, "the agent writes an exact budget for each new name a glob matches when it reads the series; spans before that are not judged", p.lacks(Loop)
		glob.Test = "collector TestCoreGlobBudgetsCompat"
	}
	rows = append(rows, glob)

	rows = append(rows, Row{Name: "stacks at the overrun", State: Works, How: "bpf_get_stack into the ring buffer", Test: "collector TestMarkerOverrunStack"})

	infl := Row{Name: "in-flight samples (spans still running)", State: Works, How: "CPU clock, sched_switch and a sleepable task iterator", Test: "internal/inflight TestStuckSpan"}
	if compat || !p.Has(CopyFromUserTask) {
		infl.State, infl.How = Declined, "overruns carry the stack where the span ended; a span that never ends is not reported"
		infl.Why = p.lacks(CopyFromUserTask, Loop, TaskStorage)
	}
	rows = append(rows, infl)
	return rows
}

// LogArgs are the arguments of the one log line that says what the
// kernel gets: the release, the core objects, and the rows that are not
// works, each with what does it instead and why.
func LogArgs(f Facts) []any {
	var replaced, declined []string
	for _, r := range Rows(f) {
		switch r.State {
		case Replaced:
			replaced = append(replaced, fmt.Sprintf("%s: %s (%s)", r.Name, r.How, r.Why))
		case Declined:
			declined = append(declined, fmt.Sprintf("%s (%s)", r.Name, r.Why))
		}
	}
	args := []any{"release", f.Probes.Release, "core", string(f.Core)}
	var works []string
	for _, r := range Rows(f) {
		if r.State == Works {
			works = append(works, r.Name)
		}
	}
	args = append(args, "works", strings.Join(works, "; "))
	if len(replaced) > 0 {
		args = append(args, "replaced", strings.Join(replaced, "; "))
	}
	if len(declined) > 0 {
		args = append(args, "declined", strings.Join(declined, "; "))
	}
	return args
}

// FeatureLines renders the probes, one line per feature: yes, no or
// unknown, with the mainline release and the probe's error.
func FeatureLines(p *Probes) []string {
	var out []string
	for _, f := range Features {
		r := p.Results[f]
		ans := "yes"
		switch {
		case r.Unknown:
			ans = "unknown"
		case !r.Have:
			ans = "no"
		}
		since := "config"
		if v, ok := f.Since(); ok {
			since = v.String() + "+"
		}
		line := fmt.Sprintf("%-22s %-7s %-7s %s", f, ans, since, f.What())
		if !r.Have && r.Err != nil {
			line += ": " + r.Err.Error()
		}
		out = append(out, line)
	}
	return out
}

// Unexpected lists the features the kernel's release should have
// (Expected) and the probes refused: what a kernel test must not skip.
func (p *Probes) Unexpected() []Feature {
	var out []Feature
	for _, f := range Features {
		if r := p.Results[f]; !r.Have && !r.Unknown && p.Expected(f) {
			out = append(out, f)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out
}

// ErrRefused wraps the errors of LoadError.
var ErrRefused = errors.New("the kernel refused a BPF program")

// A Load is the outcome of loading one set of BPF objects.
type Load struct {
	Object string   `json:"object"`
	Loaded bool     `json:"loaded"`
	Error  string   `json:"error,omitempty"`
	Log    []string `json:"-"` // the verifier's log of a refusal
}

// A Report is what `spanwatch kernel` prints: the kernel, its features,
// the table of spanwatch's features, and the objects loaded.
type Report struct {
	Release  string        `json:"release"`
	Build    string        `json:"build,omitempty"`
	Core     Core          `json:"core"`
	Features []FeatureLine `json:"features"`
	Rows     []Row         `json:"rows"`
	Loads    []Load        `json:"loads,omitempty"`
}

// A FeatureLine is one probe's answer in a Report.
type FeatureLine struct {
	Feature Feature `json:"feature"`
	What    string  `json:"what"`
	Since   string  `json:"since,omitempty"` // mainline release, "" when a build option decides
	Have    bool    `json:"have"`
	Unknown bool    `json:"unknown,omitempty"`
	Error   string  `json:"error,omitempty"`
}

// NewReport makes the report of facts and loads.
func NewReport(f Facts, loads []Load) *Report {
	r := &Report{Release: f.Probes.Release, Build: f.Probes.Build, Core: f.Core, Rows: Rows(f), Loads: loads}
	for _, feat := range Features {
		res := f.Probes.Results[feat]
		fl := FeatureLine{Feature: feat, What: feat.What(), Have: res.Have, Unknown: res.Unknown}
		if v, ok := feat.Since(); ok {
			fl.Since = v.String()
		}
		if !res.Have && res.Err != nil {
			fl.Error = res.Err.Error()
		}
		r.Features = append(r.Features, fl)
	}
	return r
}

// WriteText writes the report as tables.
func (r *Report) WriteText(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 2, 8, 2, ' ', 0)
	fmt.Fprintf(tw, "kernel %s", r.Release)
	if r.Build != "" {
		fmt.Fprintf(tw, " (%s)", r.Build)
	}
	fmt.Fprintf(tw, "\nBPF objects: %s\n\n", r.Core)
	fmt.Fprintf(tw, "KERNEL FEATURE\tHAS\tMAINLINE\tWHAT\n")
	for _, f := range r.Features {
		has := "yes"
		switch {
		case f.Unknown:
			has = "unknown"
		case !f.Have:
			has = "no"
		}
		since := f.Since
		if since == "" {
			since = "config"
		}
		what := f.What
		if f.Error != "" && !f.Have {
			what += ": " + f.Error
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", f.Feature, has, since, what)
	}
	fmt.Fprintf(tw, "\nSPANWATCH\tGETS\tHOW\tWHY NOT BETTER\n")
	for _, row := range r.Rows {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", row.Name, row.State, row.How, row.Why)
	}
	if len(r.Loads) > 0 {
		fmt.Fprintf(tw, "\nLOAD TEST\tRESULT\n")
		for _, l := range r.Loads {
			res := "loaded"
			if !l.Loaded {
				res = "not loaded: " + l.Error
			}
			fmt.Fprintf(tw, "%s\t%s\n", l.Object, res)
		}
	}
	return tw.Flush()
}
