//go:build linux && (amd64 || arm64)

package usdt

import (
	"context"
	"debug/elf"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
	"unsafe"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"github.com/cilium/ebpf/ringbuf"

	"github.com/spanwatch/spanwatch/bpf"
	"github.com/spanwatch/spanwatch/internal/kernel"
	"github.com/spanwatch/spanwatch/internal/srcspec"
	"github.com/spanwatch/spanwatch/internal/userfile"
	"github.com/spanwatch/spanwatch/snapshot"
)

// TracerConfig configures a Tracer.
type TracerConfig struct {
	Logger *slog.Logger
	// Maps are the core's maps by name (see bpf.CoreMaps), passed as
	// MapReplacements so USDT spans feed the same aggregates. Missing ones
	// are created privately (tests, or a tracer used on its own).
	Maps map[string]*ebpf.Map
	// NoCookies uses the instruction-pointer map instead of BPF cookies
	// even where the kernel has them (5.15+); it is chosen automatically
	// where it does not.
	NoCookies bool
	// NoSleepable reads string arguments (name_arg) in ordinary programs
	// even where the kernel has sleepable uprobes (6.0+), as on older
	// kernels: a name on a page that is not resident is then read by the
	// tracer through /proc/PID/mem, and its first spans are counted under
	// a placeholder until then (see UnreadableName). Chosen automatically
	// where the kernel refuses sleepable uprobes.
	NoSleepable bool
	// NoStrKfunc reads strings in sleepable programs with
	// bpf_copy_from_user (faulting the page in, then reading it) even
	// where the kernel has the bpf_copy_from_user_str kfunc (6.12+).
	NoStrKfunc bool
	// LabelSet registers the label names of a source with labels and
	// returns the label set id its series carry
	// (collector.Collector.AllocLabelSet). Nil numbers them from 1, and
	// series show the id instead of the names.
	LabelSet func(names []string, signed []bool) (uint16, error)
	// MaxSpecs bounds the call sites (default USDT_MAX_SPECS, 4096).
	MaxSpecs uint32
	// ProcRoot is /proc by default.
	ProcRoot string
	// OptimizeNop5 attaches at the nop5 of "nop; nop5" call sites where
	// the kernel optimizes uprobes on nop5 into calls (uprobe syscall,
	// 6.18+), as libbpf does. Off by default: on 6.18.44 the call that
	// replaces the nop5 pushes onto the stack below the stack pointer and
	// so overwrites the x86-64 red zone of leaf functions; seen with a
	// probe in a leaf function built at -O0, whose loop counter and locals
	// were clobbered (a hit lost, a wrong argument read). Enable it only
	// for binaries known not to place probes in leaf functions.
	OptimizeNop5 bool
	// NoUprobeMulti attaches call sites through the perf_uprobe PMU
	// (perf_event_open), as on kernels before 6.6, even where the kernel
	// has uprobe_multi links; it is chosen automatically where it does
	// not. The perf path needs CAP_SYS_ADMIN (perf_uprobe_event_init); a
	// uprobe_multi link needs only CAP_BPF and CAP_PERFMON.
	NoUprobeMulti bool

	// Core chooses the objects, which must be those of the collector
	// whose maps are in Maps (collector.Collector.Kernel().Core); "" is
	// what the kernel's features allow (kernel.Probes.ChooseCore).
	Core kernel.Core

	// testArgs loads the test-only argument recorder instead of the span
	// programs.
	testArgs bool
}

// A Tracer owns the loaded USDT object and its attachments. Close releases
// them.
type Tracer struct {
	cfg         TracerConfig
	log         *slog.Logger
	coll        *ebpf.Collection
	specs       *ebpf.Map
	ipMap       *ebpf.Map
	srcMap      *ebpf.Map
	progs       map[string]*ebpf.Program
	haveCookie  bool
	sleepable   bool // names read by sleepable programs
	sleepSingle bool // ... single probes' names too
	strKfunc    bool // ... with bpf_copy_from_user_str
	optimized   bool // uprobes on nop5 become calls (uprobe syscall, 6.18+)
	multi       bool // programs loaded for uprobe_multi links

	names     *nameReader
	requests  *ringbuf.Reader
	done      chan struct{}
	nextLabel uint16

	addMu      sync.Mutex // serializes Add, so a failed one can undo its sites
	mu         sync.Mutex
	nextSpec   uint32
	nextSource uint32
	links      []link.Link
	sites      []Site
	added      []added // the sources Add attached, in order
	closed     bool
}

// added is a source Add attached: its index in usdt_sources (and
// usdt_source_counts), its call sites and when.
type added struct {
	src   SpanSource
	index uint32
	sites int
	at    time.Time
}

// A Site is one attached call site.
type Site struct {
	SpecID uint32
	Path   string // the file as spanwatch opened it
	PID    int    // 0: every process
	Probe  Probe
	Role   string // "start", "end", "single" or "test"

	ipKey *bpf.UsdtUsdtIpKey // its usdt_ip_to_spec entry (no cookies), or nil
}

// Program names in usdt.bpf.c.
const (
	progStart   = "usdt_start"
	progStartS  = "usdt_start_s"
	progEnd     = "usdt_end"
	progSingle  = "usdt_single"
	progSingleS = "usdt_single_s"
	progTest    = "usdt_test_args"
)

// NewTracer loads the USDT BPF object. Needs CAP_BPF and CAP_PERFMON (or
// root) and kernel 5.8+.
func NewTracer(cfg TracerConfig) (*Tracer, error) {
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.ProcRoot == "" {
		cfg.ProcRoot = "/proc"
	}
	if cfg.MaxSpecs == 0 {
		cfg.MaxSpecs = uint32(bpf.UsdtUsdtSizesUSDT_MAX_SPECS)
	}
	probes := kernel.Probe()
	core := cfg.Core
	if core == "" {
		var err error
		if core, err = probes.ChooseCore(); err != nil {
			return nil, fmt.Errorf("usdt: %w", err)
		}
	}
	compat := core == kernel.CoreCompat
	load := bpf.LoadUsdt
	if compat {
		load = bpf.LoadUsdtCompat
	} else if !probes.Has(kernel.TaskStorage) {
		return nil, fmt.Errorf("usdt: the full objects need task storage in uprobe programs (Linux 5.11+ with BTF): %s; the compat core does without", probes.CompatReason())
	}
	spec, err := load()
	if err != nil {
		return nil, fmt.Errorf("load usdt bpf spec: %w", err)
	}
	spec.Maps["usdt_specs"].MaxEntries = cfg.MaxSpecs
	spec.Maps["usdt_ip_to_spec"].MaxEntries = cfg.MaxSpecs

	// Without cookies (before 5.15) sites are told apart by address
	// (bpf/usdt.h).
	haveCookie := !cfg.NoCookies && probes.Has(kernel.AttachCookie)
	if err := spec.Variables["usdt_have_cookie"].Set(boolU32(haveCookie)); err != nil {
		return nil, fmt.Errorf("set usdt_have_cookie: %w", err)
	}
	strKfunc := !cfg.NoStrKfunc && !compat && probes.Has(kernel.CopyFromUserStr)
	if v := spec.Variables["usdt_have_str_kfunc"]; v != nil {
		if err := v.Set(boolU32(strKfunc)); err != nil {
			return nil, fmt.Errorf("set usdt_have_str_kfunc: %w", err)
		}
	}
	// Names are read by sleepable programs where the kernel has sleepable
	// uprobes (6.0+); a single probe aggregates, and the core takes a new
	// series' slot from a queue map, which 6.1 refuses to sleepable
	// programs: single probes' names then go the ordinary way.
	sleepable := !cfg.testArgs && !cfg.NoSleepable && !compat && probes.Has(kernel.SleepableUprobe)
	sleepSingle := sleepable && probes.Has(kernel.SleepableQueue)

	keep := map[string]bool{
		progStart: !cfg.testArgs, progEnd: !cfg.testArgs, progSingle: !cfg.testArgs,
		progStartS: sleepable, progSingleS: sleepSingle,
		progTest: cfg.testArgs,
	}
	for name := range spec.Programs {
		if !keep[name] {
			delete(spec.Programs, name)
		}
	}
	if !cfg.testArgs {
		delete(spec.Maps, "usdt_test_events")
	}
	// Attaching through uprobe_multi links is decided at load time: the
	// programs must be loaded with that attach type.
	multi := !cfg.NoUprobeMulti && probes.Has(kernel.UprobeMulti)
	if multi {
		for _, ps := range spec.Programs {
			ps.AttachType = ebpf.AttachTraceUprobeMulti
		}
	}
	var repl map[string]*ebpf.Map
	if !cfg.testArgs {
		// The collector sizes the core's maps at load time: a
		// replacement must match the spec exactly.
		if repl, err = bpf.ShareCore(spec, cfg.Maps); err != nil {
			return nil, fmt.Errorf("usdt: %w", err)
		}
	}
	if cfg.testArgs {
		// The recorder touches none of the core's maps: leave them out.
		for _, name := range bpf.CoreMaps {
			delete(spec.Maps, name)
		}
		for _, name := range []string{"usdt_inflight", "usdt_sources", "usdt_task_start", "usdt_task_names",
			"usdt_names", "usdt_name_requests", "usdt_counters", "usdt_source_counts", "src_label_values", "src_label_count", "src_counters"} {
			delete(spec.Maps, name)
		}
		repl = nil
	}
	coll, err := ebpf.NewCollectionWithOptions(spec, ebpf.CollectionOptions{MapReplacements: repl})
	if err != nil && sleepSingle {
		// The probes allowed it, the verifier did not: single probes'
		// names go the ordinary way.
		cfg.Logger.Warn("usdt_no_sleepable_single", "error", err, "fallback", "single probes' names read through /proc/PID/mem when not resident")
		delete(spec.Programs, progSingleS)
		sleepSingle = false
		coll, err = ebpf.NewCollectionWithOptions(spec, ebpf.CollectionOptions{MapReplacements: repl})
	}
	if err != nil && sleepable {
		cfg.Logger.Warn("usdt_no_sleepable_uprobes", "error", err, "fallback", "names read through /proc/PID/mem when not resident")
		delete(spec.Programs, progStartS)
		sleepable = false
		coll, err = ebpf.NewCollectionWithOptions(spec, ebpf.CollectionOptions{MapReplacements: repl})
	}
	if err != nil {
		if lerr := kernel.NewLoadError(string(core)+" usdt", probes.Release, err); lerr != nil {
			cfg.Logger.Debug("bpf_verifier_log", "object", string(core)+" usdt", "log", kernel.VerifierLog(err))
			return nil, lerr
		}
		return nil, fmt.Errorf("load usdt bpf programs (needs CAP_BPF and CAP_PERFMON, or root): %w", err)
	}
	t := &Tracer{
		cfg:         cfg,
		log:         cfg.Logger,
		coll:        coll,
		specs:       coll.Maps["usdt_specs"],
		ipMap:       coll.Maps["usdt_ip_to_spec"],
		srcMap:      coll.Maps["usdt_sources"],
		progs:       coll.Programs,
		haveCookie:  haveCookie,
		sleepable:   sleepable,
		sleepSingle: sleepSingle,
		strKfunc:    strKfunc && sleepable,
		optimized:   cfg.OptimizeNop5 && haveUprobeSyscall(),
		multi:       multi,
		names:       newNameReader(cfg.ProcRoot, cfg.Logger.Warn),
		done:        make(chan struct{}),
	}
	if !cfg.testArgs {
		if t.requests, err = ringbuf.NewReader(coll.Maps["usdt_name_requests"]); err != nil {
			coll.Close()
			return nil, fmt.Errorf("usdt name requests: %w", err)
		}
		go t.readNameRequests()
	} else {
		close(t.done)
	}
	cfg.Logger.Debug("usdt_uprobes", "method", t.UprobeMethod(), "names", t.NameMethod())
	return t, nil
}

// NameMethod reports how string arguments are read: "copy_from_user_str"
// or "copy_from_user" (sleepable programs that fault the page in), or
// "probe_read" (ordinary programs; names on pages that are not resident
// are read by the tracer through /proc/PID/mem).
func (t *Tracer) NameMethod() string {
	switch {
	case t.strKfunc:
		return "copy_from_user_str"
	case t.sleepable:
		return "copy_from_user"
	}
	return "probe_read"
}

// readNameRequests reads the names the programs could not, as they ask,
// and gives them back through usdt_names.
func (t *Tracer) readNameRequests() {
	defer close(t.done)
	names := t.coll.Maps["usdt_names"]
	var rec ringbuf.Record
	for {
		if err := t.requests.ReadInto(&rec); err != nil {
			if errors.Is(err, ringbuf.ErrClosed) {
				return
			}
			t.log.Warn("usdt_name_requests_failed", "error", err)
			return
		}
		var req bpf.UsdtUsdtNameRequest
		if len(rec.RawSample) < int(unsafe.Sizeof(req)) {
			continue
		}
		req = *(*bpf.UsdtUsdtNameRequest)(unsafe.Pointer(&rec.RawSample[0]))
		name := t.names.resolve(req.Tgid, req.Addr)
		var v bpf.UsdtSpanName
		copy(unsafe.Slice((*byte)(unsafe.Pointer(&v.Name[0])), len(v.Name)-1), name)
		if err := names.Put(bpf.UsdtUsdtNameKey{Tgid: req.Tgid, Addr: req.Addr}, &v); err != nil {
			t.log.Warn("usdt_name_cache_failed", "error", err)
		}
	}
}

// ResolveName returns the name a placeholder series stands for (see
// UnreadableName): the string read through /proc/PID/mem, or
// UnreadableName. ok is false for any other name.
func (t *Tracer) ResolveName(name string) (string, bool) {
	tgid, addr, ok := ParsePlaceholder(name)
	if !ok {
		return name, false
	}
	return snapshot.NameString([]byte(t.names.resolve(tgid, addr))), true
}

// Stats are the tracer's counts of what did not go the straight way.
type Stats struct {
	Unpaired     uint64 // ends without an open start
	NestOverflow uint64 // starts that overwrote a thread's oldest open span
	NameFallback uint64 // names counted under a placeholder, to be read by the tracer
	NameCached   uint64 // names taken from the tracer's reads
	NameReqDrops uint64 // placeholder requests lost
	NoStorage    uint64 // starts lost: no task storage
	NameFailures uint64 // names the tracer could not read either
	LabelOther   uint64 // label values keyed "other": past their cap
	LabelFull    uint64 // label values keyed "other": the value table was full
	LabelUnread  uint64 // label values keyed "other": the argument could not be read
}

// Stats returns the counts since the tracer was loaded.
func (t *Tracer) Stats() (Stats, error) {
	sum := func(m *ebpf.Map, idx uint32) (uint64, error) {
		var vals []uint64
		if err := m.Lookup(idx, &vals); err != nil {
			return 0, err
		}
		var n uint64
		for _, v := range vals {
			n += v
		}
		return n, nil
	}
	var st Stats
	uc, sc := t.coll.Maps["usdt_counters"], t.coll.Maps["src_counters"]
	if uc == nil || sc == nil {
		return st, errors.New("a test tracer has no counters")
	}
	for _, f := range []struct {
		m   *ebpf.Map
		idx uint32
		dst *uint64
	}{
		{uc, uint32(bpf.UsdtUsdtCounterUSDT_COUNTER_UNPAIRED), &st.Unpaired},
		{uc, uint32(bpf.UsdtUsdtCounterUSDT_COUNTER_NEST_OVERFLOW), &st.NestOverflow},
		{uc, uint32(bpf.UsdtUsdtCounterUSDT_COUNTER_NAME_FALLBACK), &st.NameFallback},
		{uc, uint32(bpf.UsdtUsdtCounterUSDT_COUNTER_NAME_CACHED), &st.NameCached},
		{uc, uint32(bpf.UsdtUsdtCounterUSDT_COUNTER_NAME_REQ_DROPS), &st.NameReqDrops},
		{uc, uint32(bpf.UsdtUsdtCounterUSDT_COUNTER_NO_STORAGE), &st.NoStorage},
		{sc, uint32(bpf.UsdtSrcCounterSRC_COUNTER_LABEL_OTHER), &st.LabelOther},
		{sc, uint32(bpf.UsdtSrcCounterSRC_COUNTER_LABEL_FULL), &st.LabelFull},
		{sc, uint32(bpf.UsdtSrcCounterSRC_COUNTER_LABEL_UNREAD), &st.LabelUnread},
	} {
		n, err := sum(f.m, f.idx)
		if err != nil {
			return st, fmt.Errorf("read usdt counters: %w", err)
		}
		*f.dst = n
	}
	st.NameFailures = t.names.Failures()
	return st, nil
}

func boolU32(b bool) uint32 {
	if b {
		return 1
	}
	return 0
}

// HaveCookie reports whether sites are told apart by BPF cookies (true) or
// by the instruction-pointer map.
func (t *Tracer) HaveCookie() bool { return t.haveCookie }

// UprobeMethod reports how call sites are attached: "uprobe_multi" (a BPF
// link, 6.6+) or "perf" (the perf_uprobe PMU, which needs CAP_SYS_ADMIN).
func (t *Tracer) UprobeMethod() string {
	if t.multi {
		return "uprobe_multi"
	}
	return "perf"
}

// Sites returns the call sites attached so far.
func (t *Tracer) Sites() []Site {
	t.mu.Lock()
	defer t.mu.Unlock()
	return append([]Site(nil), t.sites...)
}

// Map returns one of the object's maps by name, nil if it has none.
func (t *Tracer) Map(name string) *ebpf.Map { return t.coll.Maps[name] }

// Add attaches a span source: every call site of its probes, in the files
// its Binary or PID select. When it fails, nothing of the source stays
// attached.
func (t *Tracer) Add(ctx context.Context, s SpanSource) (err error) {
	if t.cfg.testArgs {
		return errors.New("a test tracer records arguments only")
	}
	t.addMu.Lock()
	defer t.addMu.Unlock()
	t.mu.Lock()
	firstLink := len(t.links)
	t.mu.Unlock()
	defer func() {
		if err == nil {
			return
		}
		t.mu.Lock()
		defer t.mu.Unlock()
		if t.closed || len(t.links) < firstLink {
			return
		}
		for _, l := range t.links[firstLink:] {
			l.Close()
		}
		for _, site := range t.sites[firstLink:] {
			if site.ipKey != nil {
				t.ipMap.Delete(site.ipKey)
			}
		}
		t.links = t.links[:firstLink]
		t.sites = t.sites[:firstLink]
	}()
	t.mu.Lock()
	if t.closed {
		t.mu.Unlock()
		return errors.New("tracer closed")
	}
	srcID := t.nextSource
	if srcID >= t.srcMap.MaxEntries() {
		t.mu.Unlock()
		return fmt.Errorf("%s: more than %d usdt sources", s.Describe(), t.srcMap.MaxEntries())
	}
	t.nextSource++
	t.mu.Unlock()

	pred := s.Predicate()
	paired := s.Paired()
	type want struct {
		ref   ProbeRef
		prog  string
		args  []int // argument indexes the program reads at this probe
		last  bool  // the end or single probe: predicate, labels, value
		fast  bool  // the cookie's fast path applies
		sites []siteOf
	}
	var last []int // read at the end or single probe
	if pred != nil {
		last = append(last, pred.Operands()...)
	}
	for _, l := range s.Labels.List {
		if l.Operand < StartOperand { // else a start value: s.StartArgs
			last = append(last, l.Operand)
		}
	}
	valueArg := s.DurationArg
	if s.IsMetric() {
		valueArg = s.ValueArg
	}
	byThread := paired && s.KeyArg < 0
	fastStart := t.haveCookie && byThread && !s.Named() && len(s.StartArgs) == 0
	var nameArgs []int // read where the name is
	for _, p := range s.NameParts() {
		nameArgs = append(nameArgs, p.Ptr, p.Len)
	}
	fastEnd := fastStart && pred == nil && len(s.Labels.List) == 0
	var wants []*want
	if paired {
		startProg := progStart
		if s.Named() && t.sleepable {
			startProg = progStartS
		}
		wants = []*want{
			{ref: s.Start, prog: startProg, args: append(append([]int{s.KeyArg}, nameArgs...), s.StartArgs...), fast: fastStart},
			{ref: s.End, prog: progEnd, args: append([]int{s.KeyArg}, last...), last: true, fast: fastEnd},
		}
	} else {
		prog := progSingle
		if s.Named() && t.sleepSingle {
			prog = progSingleS
		}
		wants = []*want{{ref: s.Probe, prog: prog, args: append(append([]int{valueArg}, nameArgs...), last...), last: true}}
	}
	files, err := t.candidateFiles(ctx, s)
	if err != nil {
		return fmt.Errorf("%s: %w", s.Describe(), err)
	}
	// The files stay open until their sites are attached: the uprobes
	// take them by descriptor.
	defer func() {
		for _, f := range files {
			f.release()
		}
	}()
	var lastSites, startSites []Probe
	for _, w := range wants {
		for _, f := range files {
			for _, p := range f.Lookup(w.ref.Provider, w.ref.Name) {
				if err := checkArgs(p, w.args); err != nil {
					return fmt.Errorf("%s: %w", s.Describe(), err)
				}
				w.sites = append(w.sites, siteOf{f, p})
				if w.last {
					lastSites = append(lastSites, p)
				} else {
					startSites = append(startSites, p)
				}
			}
		}
		if len(w.sites) == 0 {
			return fmt.Errorf("%s: probe %s not found in %s%s", s.Describe(), w.ref, fileList(files), suggestIn(files, w.ref))
		}
	}

	src, err := t.encodeSource(s, pred, valueArg, last, lastSites, startSites)
	if err != nil {
		return fmt.Errorf("%s: %w", s.Describe(), err)
	}
	if err := t.srcMap.Put(srcID, src); err != nil {
		return fmt.Errorf("%s: write source: %w", s.Describe(), err)
	}
	for _, w := range wants {
		var cookieHigh uint64
		if w.fast {
			cookieHigh = cookieFast | uint64(srcID)<<cookieSourceShift
		}
		for _, x := range w.sites {
			if _, err := t.attachSite(ctx, t.progs[w.prog], x.f, x.p, s.PID, srcID, cookieHigh, roleOf(w.prog)); err != nil {
				return fmt.Errorf("%s: %w", s.Describe(), err)
			}
		}
	}
	t.mu.Lock()
	t.added = append(t.added, added{src: s, index: srcID, sites: len(t.links) - firstLink, at: time.Now()})
	t.mu.Unlock()
	return nil
}

// SourceHits is what the probes of one source Add attached did.
type SourceHits struct {
	Source SpanSource
	Sites  int       // call sites attached
	Since  time.Time // when Add attached them
	// Hits counts the probes that fired for it since then: the ends of
	// its pairs (paired with a start or not) or its single probe. Starts
	// are not counted: that cost their fast path 15%, and a start alone
	// makes nothing.
	Hits uint64
	// Unpaired counts its ends without an open start; NestOverflow its
	// starts lost to deeper ones on a full thread stack (Stats has both
	// summed over the sources).
	Unpaired, NestOverflow uint64
}

// Hits returns what the probes of every source Add attached did, in the
// order they were added.
func (t *Tracer) Hits() ([]SourceHits, error) {
	m := t.coll.Maps["usdt_source_counts"]
	if m == nil {
		return nil, errors.New("a test tracer counts no hits")
	}
	t.mu.Lock()
	srcs := slices.Clone(t.added)
	t.mu.Unlock()
	out := make([]SourceHits, len(srcs))
	var vals []bpf.UsdtUsdtSourceCounts
	for i, a := range srcs {
		if err := m.Lookup(a.index, &vals); err != nil {
			return nil, fmt.Errorf("read usdt source counts: %w", err)
		}
		out[i] = SourceHits{Source: a.src, Sites: a.sites, Since: a.at}
		for _, v := range vals {
			out[i].Hits += v.Hits
			out[i].Unpaired += v.Unpaired
			out[i].NestOverflow += v.NestOverflow
		}
	}
	return out, nil
}

// The fast-path cookie, enum usdt_cookie_bits in bpf/usdt.bpf.c:
// cookieFast (USDT_COOKIE_FAST) says the program needs no spec, and the
// site's source sits at cookieSourceShift, under cookieSourceMask.
const (
	cookieFast        = uint64(1) << bpf.UsdtUsdtCookieBitsUSDT_COOKIE_FAST_BIT
	cookieSourceShift = uint(bpf.UsdtUsdtCookieBitsUSDT_COOKIE_SOURCE_SHIFT)
	cookieSourceMask  = uint32(bpf.UsdtUsdtCookieBitsUSDT_COOKIE_SOURCE_MASK)
)

type siteOf struct {
	f *File
	p Probe
}

// encodeSource builds the source's usdt_sources entry: names, arguments,
// predicate and labels (registering the label set).
func (t *Tracer) encodeSource(s SpanSource, pred *srcspec.Predicate, valueArg int, last []int, lastSites, startSites []Probe) (*bpf.UsdtUsdtSource, error) {
	var src bpf.UsdtUsdtSource
	name := s.SpanName()
	if s.IsMetric() {
		name = s.Metric
	}
	name = snapshot.TruncateName(name)
	copy(unsafe.Slice((*byte)(unsafe.Pointer(&src.Name[0])), len(src.Name)-1), name)
	if name != "" {
		src.NameId = snapshot.NameID(name)
	}
	src.NameArg, src.KeyArg, src.ValueArg = argIdx(s.NameArg), argIdx(s.KeyArg), argIdx(valueArg)
	if s.Named() && (s.Prefix != "" || len(s.NameArgs) > 0) {
		segs, err := encodeName(&s)
		if err != nil {
			return nil, err
		}
		src.NameSegs = segs
		src.NameArg = argIdx(s.NameParts()[0].Ptr)
		src.Flags |= uint8(bpf.UsdtUsdtSourceFlagsUSDT_SRC_COMPOSED)
	}
	var mask uint16
	for _, a := range append(last, valueArg) {
		if a >= 0 {
			mask |= 1 << a
		}
	}
	src.EndArgs = mask
	if len(s.StartArgs) > len(src.StartArg) {
		return nil, fmt.Errorf("%d start arguments, more than %d", len(s.StartArgs), len(src.StartArg))
	}
	for i, a := range s.StartArgs {
		src.StartArg[i] = uint8(a)
	}
	src.StartN = uint8(len(s.StartArgs))
	if s.IsMetric() {
		src.Flags |= uint8(bpf.UsdtUsdtSourceFlagsUSDT_SRC_METRIC)
	}
	if pred != nil {
		src.Flags |= uint8(bpf.UsdtUsdtSourceFlagsUSDT_SRC_ERROR)
		p := pred.Encode()
		src.Error = *(*bpf.UsdtSrcPred)(unsafe.Pointer(&p))
	}
	if len(s.Labels.List) > 0 {
		names := s.Labels.Names()
		// A label is signed when its argument is at the first call
		// site of the probe that reads it (sites of one probe agree in
		// practice: they are the same C expression).
		signed := make([]bool, len(s.Labels.List))
		for i, l := range s.Labels.List {
			sites, arg := lastSites, l.Operand
			if arg >= StartOperand {
				sites, arg = startSites, s.StartArgs[arg-StartOperand]
			}
			if len(sites) > 0 && arg < len(sites[0].Args) {
				signed[i] = sites[0].Args[arg].Signed
			}
		}
		id, err := t.labelSet(names, signed)
		if err != nil {
			return nil, err
		}
		ls := s.Labels.Encode(id)
		src.Labels = *(*bpf.UsdtSrcLabels)(unsafe.Pointer(&ls))
	}
	return &src, nil
}

// encodeName encodes the pieces of a name built from string arguments,
// its prefix and separators (usdt_source.name_segs).
func encodeName(s *SpanSource) ([bpf.UsdtUsdtNameSizesUSDT_NAME_SEGS]bpf.UsdtUsdtNameSeg, error) {
	var segs [bpf.UsdtUsdtNameSizesUSDT_NAME_SEGS]bpf.UsdtUsdtNameSeg
	n := 0
	add := func(sg bpf.UsdtUsdtNameSeg) bool {
		if n == len(segs) {
			return false
		}
		segs[n] = sg
		n++
		return true
	}
	text := func(t string) bool {
		for len(t) > 0 {
			var sg bpf.UsdtUsdtNameSeg
			sg.Kind = uint8(bpf.UsdtUsdtSegKindUSDT_SEG_TEXT_KIND)
			c := copy(unsafe.Slice((*byte)(unsafe.Pointer(&sg.Text[0])), len(sg.Text)), t)
			sg.TextLen = uint8(c)
			t = t[c:]
			if !add(sg) {
				return false
			}
		}
		return true
	}
	ok := text(s.Prefix)
	for i, p := range s.NameParts() {
		if i > 0 {
			ok = ok && text(s.NameSeparator)
		}
		sg := bpf.UsdtUsdtNameSeg{Kind: uint8(bpf.UsdtUsdtSegKindUSDT_SEG_STR), Arg: uint8(p.Ptr), LenArg: noArg}
		if p.Len >= 0 {
			sg.Kind, sg.LenArg = uint8(bpf.UsdtUsdtSegKindUSDT_SEG_MEM), uint8(p.Len)
		}
		ok = ok && add(sg)
	}
	if !ok {
		return segs, fmt.Errorf("the name %s needs more than %d pieces", s.NameDesc(), len(segs))
	}
	return segs, nil
}

// labelSet registers a source's label names.
func (t *Tracer) labelSet(names []string, signed []bool) (uint16, error) {
	if t.cfg.LabelSet != nil {
		id, err := t.cfg.LabelSet(names, signed)
		if err != nil {
			return 0, fmt.Errorf("register labels %v: %w", names, err)
		}
		if id == 0 || id > srcspec.MaxLabelSet {
			return 0, fmt.Errorf("register labels %v: label set id %d out of range 1..%d", names, id, srcspec.MaxLabelSet)
		}
		return id, nil
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.nextLabel >= srcspec.MaxLabelSet {
		return 0, fmt.Errorf("more than %d sources with labels", srcspec.MaxLabelSet)
	}
	t.nextLabel++
	return t.nextLabel, nil
}

// suggestIn names the probe nearest to ref in files, as a hint.
func suggestIn(files []*File, ref ProbeRef) string {
	if len(files) == 1 {
		return suggestProbe(files[0], ref)
	}
	merged := &File{}
	for _, f := range files {
		merged.Probes = append(merged.Probes, f.Probes...)
	}
	if h := suggestProbe(merged, ref); strings.HasPrefix(h, ": did you mean") {
		return h
	}
	return ""
}

func roleOf(prog string) string {
	switch prog {
	case progStart, progStartS:
		return "start"
	case progEnd:
		return "end"
	case progSingle, progSingleS:
		return "single"
	}
	return "test"
}

func fileList(files []*File) string {
	if len(files) == 1 {
		return files[0].Path
	}
	return fmt.Sprintf("%d files", len(files))
}

func argIdx(i int) uint8 {
	if i < 0 {
		return noArg
	}
	return uint8(i)
}

// checkArgs makes sure a call site has the arguments a source reads.
func checkArgs(p Probe, idx []int) error {
	for _, i := range idx {
		if i < 0 {
			continue
		}
		if p.ArgErr != nil {
			return p.ArgErr
		}
		if i >= len(p.Args) {
			return fmt.Errorf("probe %s at %#x has %d arguments: no argument %d", p.FullName(), p.Address, len(p.Args), i)
		}
	}
	return nil
}

// candidateFiles opens the files whose probes a source uses, and keeps
// them open (File.release closes them). Files of a process are opened
// inside its root, as it sees them (userfile).
func (t *Tracer) candidateFiles(ctx context.Context, s SpanSource) ([]*File, error) {
	var paths []string
	on := ""
	switch {
	case s.PID != 0 && s.Binary != "":
		paths = []string{filepath.Join(t.cfg.ProcRoot, strconv.Itoa(s.PID), "root", s.Binary)}
	case s.PID != 0:
		exe := filepath.Join(t.cfg.ProcRoot, strconv.Itoa(s.PID), "exe")
		libs, err := ProcessFiles(t.cfg.ProcRoot, s.PID)
		if err != nil {
			return nil, err
		}
		paths = append([]string{exe}, libs...)
	default:
		paths = []string{s.Binary}
	}
	if s.PID != 0 {
		on = userfile.OnPID(t.cfg.ProcRoot, s.PID)
	}
	var files []*File
	seen := map[devIno]bool{}
	for i, p := range paths {
		f, err := open(ctx, p, on)
		if err != nil {
			if s.PID != 0 && s.Binary == "" && i > 0 {
				continue // a mapped file without probes, or not ELF
			}
			for _, f := range files {
				f.release()
			}
			if errors.Is(err, ErrNoProbes) {
				return nil, fmt.Errorf("%s has no USDT probes (spanwatch probes %s lists them)", p, p)
			}
			return nil, err
		}
		// The executable is among a process's mapped files too: attach
		// to each file once, or every probe would fire twice.
		if id := (devIno{f.dev, f.ino}); seen[id] {
			f.release()
			continue
		} else {
			seen[id] = true
		}
		files = append(files, f)
	}
	return files, nil
}

// hostMachine is the ELF machine of the binaries the BPF object can
// read the arguments of: it is built for the host's architecture, and
// argument specs are pt_regs offsets of the binary's.
var hostMachine = map[string]elf.Machine{"amd64": elf.EM_X86_64, "arm64": elf.EM_AARCH64}[runtime.GOARCH]

// AttachSite attaches prog at one call site of file f (for every process
// running it when pid is 0), with a new spec for the site's arguments.
// It returns the spec id.
func (t *Tracer) attachSite(_ context.Context, prog *ebpf.Program, f *File, p Probe, pid int, source uint32, cookieHigh uint64, role string) (_ uint32, err error) {
	if prog == nil {
		return 0, fmt.Errorf("program for %s not loaded", role)
	}
	if f.Machine != hostMachine {
		return 0, fmt.Errorf("probe %s: a %s binary on a %s host: the BPF program reads this host's registers", p.FullName(), f.Machine, runtime.GOARCH)
	}
	t.mu.Lock()
	if t.closed {
		t.mu.Unlock()
		return 0, errors.New("tracer closed")
	}
	id := t.nextSpec
	if id >= t.specs.MaxEntries() {
		t.mu.Unlock()
		return 0, fmt.Errorf("more than %d usdt call sites", t.specs.MaxEntries())
	}
	t.nextSpec++
	t.mu.Unlock()

	args := p.Args
	if p.ArgErr != nil {
		args = nil // a source that reads no argument can still use the site
	}
	// At a "nop; nop5" site, attach to the nop5 where the kernel turns
	// such uprobes into calls: the handler then sees ip one byte further,
	// which RIP-relative arguments and the IP map must account for.
	if t.optimized && p.Nop5 {
		p.Offset++
		p.Address++
		args = append([]Arg(nil), args...)
		for i := range args {
			if args[i].Kind == ArgDeref && args[i].Reg == "rip" {
				args[i].Offset--
			}
		}
	}
	spec, err := bpfSpec(args, source)
	if err != nil {
		return 0, fmt.Errorf("probe %s at %#x: %w", p.FullName(), p.Address, err)
	}
	if err := t.specs.Put(id, &spec); err != nil {
		return 0, fmt.Errorf("probe %s: write spec: %w", p.FullName(), err)
	}
	var cookie uint64
	var ipKey *bpf.UsdtUsdtIpKey // the site's usdt_ip_to_spec entry, without cookies
	if t.haveCookie {
		cookie = cookieHigh | uint64(id)
	} else {
		var key bpf.UsdtUsdtIpKey
		switch {
		case pid != 0:
			addr, err := runtimeAddress(t.cfg.ProcRoot, pid, f, p.Offset)
			if err != nil {
				return 0, fmt.Errorf("probe %s: %w", p.FullName(), err)
			}
			key.Tgid, key.Ip = uint32(pid), addr
		case f.Executable && f.CodeLen != 0:
			// Every process running the file: the site's distance
			// from the start of its code, and the code's length, are
			// the same in each (see bpf/usdt.h).
			key.CodeLen, key.Ip = f.CodeLen, p.Address-f.CodeStart
		default:
			return 0, fmt.Errorf("probe %s in %s: this kernel has no BPF cookies (5.15+), so a shared library's probes can only be traced in one process: give pid:", p.FullName(), f.Path)
		}
		if err := t.ipMap.Update(&key, id, ebpf.UpdateNoExist); err != nil {
			if errors.Is(err, ebpf.ErrKeyExist) {
				return 0, fmt.Errorf("probe %s at %#x in %s: another source uses this call site, or another executable with code of the same length has one at the same place; without BPF cookies (5.15+) a call site feeds one source: give pid: to tell processes apart", p.FullName(), p.Address, f.Path)
			}
			return 0, fmt.Errorf("probe %s: write ip map: %w", p.FullName(), err)
		}
		ipKey = &key
		defer func() {
			if err != nil {
				t.ipMap.Delete(ipKey)
			}
		}()
	}
	ex, err := link.OpenExecutable(f.fdPath())
	if err != nil {
		return 0, fmt.Errorf("probe %s: %w", p.FullName(), err)
	}
	var l link.Link
	if t.multi {
		// One link per site: a site's spec, cookie and rollback stay
		// its own, as on the perf path.
		opts := &link.UprobeMultiOptions{Addresses: []uint64{p.Offset}, PID: uint32(pid)}
		if p.SemaphoreOffset != 0 {
			opts.RefCtrOffsets = []uint64{p.SemaphoreOffset}
		}
		if t.haveCookie {
			opts.Cookies = []uint64{cookie}
		}
		l, err = ex.UprobeMulti(nil, prog, opts)
	} else {
		l, err = ex.Uprobe("", prog, &link.UprobeOptions{Address: p.Offset, PID: pid, RefCtrOffset: p.SemaphoreOffset, Cookie: cookie})
	}
	if err != nil {
		if !t.multi && errors.Is(err, os.ErrPermission) {
			return 0, fmt.Errorf("attach usdt %s:%s at %#x: the perf_uprobe PMU needs CAP_SYS_ADMIN (kernels before 6.6, or NoUprobeMulti): %w", f.Path, p.FullName(), p.Offset, err)
		}
		return 0, fmt.Errorf("attach usdt %s:%s at %#x (%s): %w", f.Path, p.FullName(), p.Offset, t.UprobeMethod(), err)
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		l.Close()
		return 0, errors.New("tracer closed")
	}
	t.links = append(t.links, l)
	t.sites = append(t.sites, Site{SpecID: id, Path: f.Path, PID: pid, Probe: p, Role: role, ipKey: ipKey})
	t.log.Debug("usdt_attached", "probe", p.FullName(), "path", f.Path, "offset", p.Offset, "pid", pid, "spec", id, "role", role, "method", t.UprobeMethod())
	return id, nil
}

// Close detaches every probe and unloads the object. It is idempotent.
func (t *Tracer) Close() error {
	t.mu.Lock()
	if t.closed {
		t.mu.Unlock()
		return nil
	}
	t.closed = true
	links := t.links
	t.links = nil
	t.mu.Unlock()
	var errs []error
	for _, l := range links {
		if err := l.Close(); err != nil {
			errs = append(errs, err)
		}
	}
	if t.requests != nil {
		t.requests.Close()
	}
	<-t.done
	t.coll.Close()
	return errors.Join(errs...)
}

// Program returns one of the loaded programs ("usdt_start", "usdt_end",
// "usdt_single", and the sleepable "usdt_start_s" and "usdt_single_s"),
// nil if it is not loaded: for its run statistics.
func (t *Tracer) Program(name string) *ebpf.Program { return t.progs[name] }
