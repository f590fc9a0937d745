//go:build linux && amd64

package usdt

import (
	"context"
	"debug/elf"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"sync"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/features"
	"github.com/cilium/ebpf/link"

	"github.com/spanwatch/spanwatch/bpf"
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
	// NoTaskStorage keeps thread-paired start times in the hash map even
	// where tracing programs have task storage (5.11+), as on older
	// kernels; it is chosen automatically where they do not.
	NoTaskStorage bool
	// MaxSpecs bounds the call sites (default 4096).
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

	// testArgs loads the test-only argument recorder instead of the span
	// programs.
	testArgs bool
}

// A Tracer owns the loaded USDT object and its attachments. Close releases
// them.
type Tracer struct {
	cfg        TracerConfig
	log        *slog.Logger
	coll       *ebpf.Collection
	specs      *ebpf.Map
	ipMap      *ebpf.Map
	srcMap     *ebpf.Map
	progs      map[string]*ebpf.Program
	haveCookie bool
	haveTask   bool // task storage for thread-paired spans
	optimized  bool // uprobes on nop5 become calls (uprobe syscall, 6.18+)
	multi      bool // programs loaded for uprobe_multi links

	addMu      sync.Mutex // serializes Add, so a failed one can undo its sites
	mu         sync.Mutex
	nextSpec   uint32
	nextSource uint32
	links      []link.Link
	sites      []Site
	closed     bool
}

// A Site is one attached call site.
type Site struct {
	SpecID uint32
	Path   string // the file as spanwatch opened it
	PID    int    // 0: every process
	Probe  Probe
	Role   string // "start", "end", "single" or "test"
}

// Program names in usdt.bpf.c.
const (
	progStart  = "usdt_start"
	progEnd    = "usdt_end"
	progSingle = "usdt_single"
	progTest   = "usdt_test_args"
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
		cfg.MaxSpecs = 4096
	}
	spec, err := bpf.LoadUsdt()
	if err != nil {
		return nil, fmt.Errorf("load usdt bpf spec: %w", err)
	}
	spec.Maps["usdt_specs"].MaxEntries = cfg.MaxSpecs
	spec.Maps["usdt_ip_to_spec"].MaxEntries = cfg.MaxSpecs

	haveCookie := !cfg.NoCookies
	if haveCookie {
		if err := features.HaveProgramHelper(ebpf.Kprobe, asm.FnGetAttachCookie); err != nil {
			cfg.Logger.Info("usdt_no_bpf_cookie", "fallback", "ip_map", "reason", err)
			haveCookie = false
		}
	}
	if err := spec.Variables["usdt_have_cookie"].Set(boolU32(haveCookie)); err != nil {
		return nil, fmt.Errorf("set usdt_have_cookie: %w", err)
	}

	// Thread-paired spans keep their start in task storage where tracing
	// programs can use it (5.11+); elsewhere the path is compiled out and
	// the map becomes a placeholder the verifier never sees used.
	haveTaskStorage := !cfg.NoTaskStorage && features.HaveMapType(ebpf.TaskStorage) == nil &&
		features.HaveProgramHelper(ebpf.Kprobe, asm.FnTaskStorageGet) == nil &&
		features.HaveProgramHelper(ebpf.Kprobe, asm.FnGetCurrentTaskBtf) == nil
	if err := spec.Variables["usdt_have_task_storage"].Set(boolU32(haveTaskStorage)); err != nil {
		return nil, fmt.Errorf("set usdt_have_task_storage: %w", err)
	}
	if !haveTaskStorage {
		cfg.Logger.Info("usdt_no_task_storage", "fallback", "hash_map")
		ms := spec.Maps["usdt_task_start"]
		ms.Type, ms.Flags, ms.MaxEntries = ebpf.Hash, 0, 1
	}

	keep := map[string]bool{progStart: !cfg.testArgs, progEnd: !cfg.testArgs, progSingle: !cfg.testArgs, progTest: cfg.testArgs}
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
	multi := !cfg.NoUprobeMulti && features.HaveBPFLinkUprobeMulti() == nil
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
		delete(spec.Maps, "usdt_inflight")
		delete(spec.Maps, "usdt_sources")
		delete(spec.Maps, "usdt_task_start")
		repl = nil
	}
	coll, err := ebpf.NewCollectionWithOptions(spec, ebpf.CollectionOptions{MapReplacements: repl})
	if err != nil {
		var verr *ebpf.VerifierError
		if errors.As(err, &verr) {
			return nil, fmt.Errorf("load usdt bpf programs: %+v", verr)
		}
		return nil, fmt.Errorf("load usdt bpf programs (needs CAP_BPF and CAP_PERFMON, or root): %w", err)
	}
	t := &Tracer{
		cfg:        cfg,
		log:        cfg.Logger,
		coll:       coll,
		specs:      coll.Maps["usdt_specs"],
		ipMap:      coll.Maps["usdt_ip_to_spec"],
		srcMap:     coll.Maps["usdt_sources"],
		progs:      coll.Programs,
		haveCookie: haveCookie,
		haveTask:   haveTaskStorage,
		optimized:  cfg.OptimizeNop5 && haveUprobeSyscall(),
		multi:      multi,
	}
	cfg.Logger.Debug("usdt_uprobes", "method", t.UprobeMethod())
	return t, nil
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

	var src bpf.UsdtUsdtSource
	for i := 0; i < len(s.Span) && i < len(src.Name)-1; i++ {
		src.Name[i] = int8(s.Span[i])
	}
	if s.Span != "" {
		src.NameId = snapshot.NameID(s.Span)
	}
	src.NameArg, src.KeyArg, src.StatusArg, src.DurationArg = argIdx(s.NameArg), argIdx(s.KeyArg), argIdx(s.StatusArg), argIdx(s.DurationArg)
	if err := t.srcMap.Put(srcID, &src); err != nil {
		return fmt.Errorf("%s: write source: %w", s.Describe(), err)
	}
	// The fast path (see usdt.bpf.c): the task slot travels in the cookie;
	// the end takes the name and its id from the source.
	var cookieHigh uint64
	if t.haveCookie && t.haveTask && s.Paired() && s.KeyArg < 0 && s.NameArg < 0 && s.StatusArg < 0 && srcID < taskSlots {
		cookieHigh = uint64(srcID+1) << 32
	}

	type want struct {
		ref  ProbeRef
		prog string
		args []int // argument indexes the program reads at this probe
	}
	var wants []want
	if s.Paired() {
		startArgs := []int{s.KeyArg, s.NameArg}
		endArgs := []int{s.KeyArg, s.StatusArg}
		wants = []want{{s.Start, progStart, startArgs}, {s.End, progEnd, endArgs}}
	} else {
		wants = []want{{s.Probe, progSingle, []int{s.DurationArg, s.NameArg, s.StatusArg}}}
	}
	files, err := t.candidateFiles(s)
	if err != nil {
		return fmt.Errorf("%s: %w", s.Describe(), err)
	}
	for _, w := range wants {
		n := 0
		for _, f := range files {
			for _, p := range f.Lookup(w.ref.Provider, w.ref.Name) {
				if err := checkArgs(p, w.args); err != nil {
					return fmt.Errorf("%s: %w", s.Describe(), err)
				}
				if _, err := t.attachSite(ctx, t.progs[w.prog], f, p, s.PID, srcID, cookieHigh, roleOf(w.prog)); err != nil {
					return fmt.Errorf("%s: %w", s.Describe(), err)
				}
				n++
			}
		}
		if n == 0 {
			return fmt.Errorf("%s: probe %s not found in %s", s.Describe(), w.ref, fileList(files))
		}
	}
	return nil
}

// taskSlots is USDT_TASK_SLOTS: sources with a task-storage slot.
const taskSlots = 16

func roleOf(prog string) string {
	switch prog {
	case progStart:
		return "start"
	case progEnd:
		return "end"
	case progSingle:
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

// candidateFiles opens the files whose probes a source uses.
func (t *Tracer) candidateFiles(s SpanSource) ([]*File, error) {
	var paths []string
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
	var files []*File
	seen := map[devIno]bool{}
	for i, p := range paths {
		// The executable is among a process's mapped files too: attach
		// to each file once, or every probe would fire twice.
		if id, err := statDevIno(p); err == nil {
			if seen[id] {
				continue
			}
			seen[id] = true
		}
		f, err := Open(p)
		if err != nil {
			if s.PID != 0 && s.Binary == "" && i > 0 {
				continue // a mapped file without probes, or not ELF
			}
			if errors.Is(err, ErrNoProbes) {
				return nil, fmt.Errorf("%s has no USDT probes (spanwatch probes %s lists them)", p, p)
			}
			return nil, err
		}
		files = append(files, f)
	}
	return files, nil
}

// AttachSite attaches prog at one call site of file f (for every process
// running it when pid is 0), with a new spec for the site's arguments.
// It returns the spec id.
func (t *Tracer) attachSite(_ context.Context, prog *ebpf.Program, f *File, p Probe, pid int, source uint32, cookieHigh uint64, role string) (uint32, error) {
	if prog == nil {
		return 0, fmt.Errorf("program for %s not loaded", role)
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
	if t.haveCookie {
		cookie = cookieHigh | uint64(id)
	} else {
		key := bpf.UsdtUsdtIpKey{Ip: p.Address}
		switch {
		case f.Type == elf.ET_EXEC:
			// Loaded at its link-time address in every process.
			key.Tgid = uint32(pid)
		case pid != 0:
			addr, err := runtimeAddress(t.cfg.ProcRoot, pid, f.Path, p.Offset)
			if err != nil {
				return 0, fmt.Errorf("probe %s: %w", p.FullName(), err)
			}
			key.Tgid, key.Ip = uint32(pid), addr
		default:
			return 0, fmt.Errorf("probe %s in %s: this kernel has no BPF cookies (5.15+), so a PIE executable or shared library can only be traced in one process: give pid:", p.FullName(), f.Path)
		}
		if err := t.ipMap.Put(&key, id); err != nil {
			return 0, fmt.Errorf("probe %s: write ip map: %w", p.FullName(), err)
		}
	}
	ex, err := link.OpenExecutable(f.Path)
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
	t.sites = append(t.sites, Site{SpecID: id, Path: f.Path, PID: pid, Probe: p, Role: role})
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
	t.coll.Close()
	return errors.Join(errs...)
}

// Program returns one of the loaded programs ("usdt_start", "usdt_end",
// "usdt_single"), nil if it is not loaded: for its run statistics.
func (t *Tracer) Program(name string) *ebpf.Program { return t.progs[name] }
