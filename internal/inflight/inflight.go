//go:build linux

package inflight

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"

	"strings"
	"sync"
	"time"
	"unsafe"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"

	"github.com/spanwatch/spanwatch/bpf"
	"github.com/spanwatch/spanwatch/internal/kernel"
	"github.com/spanwatch/spanwatch/snapshot"
)

// Constants shared with the BPF programs, generated from their enums.
const (
	// sourceUSDT is SOURCE_USDT in bpf/aggregate.h.
	sourceUSDT = uint32(bpf.SpanwatchSpanSourceSOURCE_USDT)
	// noArg is SRC_NO_ARG in bpf/source.h: the source does not take the
	// name or the pairing key from an argument.
	noArg = uint8(bpf.UsdtSrcIndexSRC_NO_ARG)
	// Target flags, enum inflight_target_flags in bpf/inflight.bpf.c.
	targetSDK       = uint32(bpf.InflightInflightTargetFlagsTARGET_SDK)
	targetGoroutine = uint32(bpf.InflightInflightTargetFlagsTARGET_GOROUTINE)
	// Sizes, enum inflight_watch_sizes in bpf/inflight.bpf.c.
	targetSpans = uint32(bpf.InflightInflightWatchSizesINFLIGHT_TARGET_SPANS)
	maxParked   = int(bpf.InflightInflightWatchSizesINFLIGHT_MAX_PARKED)
)

// Config configures a Watcher. Budgets and Overruns, the core's maps, are
// required, and the maps of at least one kind of span: Exec (the SDKs'
// spans) or Inflight and Sources (USDT).
type Config struct {
	Logger   *slog.Logger
	Budgets  *ebpf.Map
	Overruns *ebpf.Map
	// Counters is the core's counters map, where ring buffer drops are
	// counted; the watcher's own when nil.
	Counters *ebpf.Map
	// Exec and GProcs are the core's inflight_exec and inflight_gprocs
	// (bpf/inflight.h): the open spans of the span SDKs by goroutine or
	// thread, and where Go processes keep g. Nil: SDK spans are not
	// watched.
	Exec, GProcs *ebpf.Map
	// Core is the core's core map (bpf/aggregate.h), whose budget_gen
	// says which of the two sets in Budgets is in force; nil: set 0 (tests
	// that write Budgets themselves).
	Core *ebpf.Map
	// Budget returns a span's budget in nanoseconds, 0 for none; nil
	// looks the name id up in Budgets (set 0, exact names only). prefix says the span's final
	// name may extend name (SPAN_F_NAME_PREFIX: a start name the tracing
	// library completes when the span ends).
	Budget func(nameID uint64, name string, prefix bool) uint64
	// MinBudget returns the smallest budget a span can have, so that a
	// scan lists only spans open at least that long; nil takes the
	// smallest in Budgets.
	MinBudget func() uint64
	// Inflight and Sources are a USDT tracer's usdt_inflight and
	// usdt_sources (see also AddUSDT).
	Inflight *ebpf.Map
	Sources  *ebpf.Map
	// TaskStart and TaskNames are the USDT object's usdt_task_start and
	// usdt_task_names, where spans paired by thread keep their starts (and
	// names read from an argument) in task storage (5.11+); nil when they
	// are not in use. A task iterator scans them.
	TaskStart *ebpf.Map
	TaskNames *ebpf.Map
	// Interval is how often the in-flight spans are scanned; 100ms when
	// zero. A stuck span is sampled within about Interval of its budget,
	// and a blocked thread or parked goroutine once per Interval.
	Interval time.Duration
	// Samples is the number of samples taken of a thread of execution
	// while its spans are over budget; 100 when zero. Each is one overrun
	// record per overdue span.
	Samples int
	// Frequency is the on-CPU sampling rate in Hz while a thread is
	// watched, and bounds how often a thread going off the CPU is
	// sampled; 99 when zero.
	Frequency uint64
	// NoOnCPU, NoOffCPU and NoBlocked turn off one of the samplers: the
	// CPU clock, sched_switch, and the iterator that samples threads that
	// stay blocked and parked goroutines (kernel 5.18+; left out where it
	// does not load).
	NoOnCPU, NoOffCPU, NoBlocked bool
}

// USDTMaps are the maps of a USDT tracer (internal/usdt) whose spans a
// Watcher watches: usdt_inflight, usdt_sources, usdt_task_start and
// usdt_task_names.
type USDTMaps struct {
	Inflight, Sources, TaskStart, TaskNames *ebpf.Map
}

// A Watcher samples threads and goroutines whose spans run past their
// budgets.
type Watcher struct {
	cfg  Config
	log  *slog.Logger
	spec *ebpf.CollectionSpec
	repl map[string]*ebpf.Map
	objs objects
	list *link.Iter // over inflight_exec; nil without Config.Exec
	task *taskObjects
	iter *link.Iter // over tasks, for usdt_task_start
	// blocked samples watched threads that sleep and parked goroutines;
	// nil when off or not supported.
	blocked     *ebpf.Program
	blockedIter *link.Iter
	// runIterFn runs the blocked sampler's iterator (runIter; tests put
	// one that hangs), for at most blockedWait.
	runIterFn   func(*link.Iter) error
	blockedWait time.Duration
	slots       map[uint32]bpf.InflightInflightSlot // as last written, by source
	srcBuf      []bpf.UsdtUsdtSource

	mu       sync.Mutex
	watching map[bpf.InflightInflightExecKey]identity // the targets this watcher wrote
	parked   int                                      // entries of inflight_parked in use
	offCPU   link.Link
	perfFDs  []int
	closed   bool
	// usdtOwned are the watcher's clones of the maps AddUSDT was given
	// (usdtFrom is the usdt_inflight it was given), closed by Close.
	usdtOwned []*ebpf.Map
	usdtFrom  *ebpf.Map
	lastErr   string
	minAge    uint64 // as last written to inflight_cfg
	// early is inflight_early as last written: the budgets of the span
	// names sampled from their start, by name id.
	early map[uint64]uint64
	// Buffers of scanSDKBatch.
	batchKeys []bpf.InflightInflightExecKey
	batchVals []bpf.InflightInflightStack
	idle      []bpf.InflightInflightExecKey
}

// identity tells a target's spans from the next ones of the same thread of
// execution.
type identity struct {
	n      uint32
	starts [targetSpans]uint64
}

func identityOf(t *bpf.InflightInflightTarget) identity {
	id := identity{n: t.Nspans}
	for i := range t.Spans {
		id.starts[i] = t.Spans[i].StartNs
	}
	return id
}

// objects are what the watcher loads of bpf/inflight.bpf.c.
type objects struct {
	InflightOnCpu  *ebpf.Program `ebpf:"inflight_on_cpu"`
	InflightOffCpu *ebpf.Program `ebpf:"inflight_off_cpu"`
	InflightWatch  *ebpf.Map     `ebpf:"inflight_watch"`
	InflightParked *ebpf.Map     `ebpf:"inflight_parked"`
	InflightEarly  *ebpf.Map     `ebpf:"inflight_early"`
}

func (o *objects) Close() error {
	return errors.Join(o.InflightOnCpu.Close(), o.InflightOffCpu.Close(), o.InflightWatch.Close(), o.InflightParked.Close(), o.InflightEarly.Close())
}

// listObjects list inflight_exec's old spans.
type listObjects struct {
	InflightList *ebpf.Program `ebpf:"inflight_list"`
	InflightCfg  *ebpf.Map     `ebpf:"inflight_cfg"`
}

// taskObjects scan usdt_task_start.
type taskObjects struct {
	InflightScan  *ebpf.Program `ebpf:"inflight_scan"`
	InflightSlots *ebpf.Map     `ebpf:"inflight_slots"`
}

func (o *taskObjects) Close() error {
	return errors.Join(o.InflightScan.Close(), o.InflightSlots.Close())
}

// New loads the sampling programs. They are attached only while something
// is watched.
func New(cfg Config) (*Watcher, error) {
	if err := bpf.CheckArch(); err != nil {
		return nil, fmt.Errorf("inflight watcher: %w", err)
	}
	if cfg.Budgets == nil || cfg.Overruns == nil {
		return nil, errors.New("inflight watcher: the budgets and overruns maps are required")
	}
	if cfg.Exec == nil && (cfg.Inflight == nil || cfg.Sources == nil) {
		return nil, errors.New("inflight watcher: the inflight_exec map, or the usdt_inflight and usdt_sources maps, are required")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Interval == 0 {
		cfg.Interval = 100 * time.Millisecond
	}
	if cfg.Samples == 0 {
		cfg.Samples = 100
	}
	if cfg.Frequency == 0 {
		cfg.Frequency = 99
	}
	spec, err := bpf.LoadInflight()
	if err != nil {
		return nil, fmt.Errorf("load inflight spec: %w", err)
	}
	// The core's maps come from aggregate.h and inflight.h; only those
	// the programs use are loaded, all replaced.
	repl := map[string]*ebpf.Map{"overruns": cfg.Overruns}
	if cfg.Counters != nil {
		repl["counters"] = cfg.Counters
	}
	if cfg.Exec != nil {
		repl["inflight_exec"] = cfg.Exec
	}
	if cfg.GProcs != nil {
		repl["inflight_gprocs"] = cfg.GProcs
	}
	// A replacement must match its spec: the collector sizes some of
	// these maps (the ring buffer, collector.Config.RingbufBytes).
	for name, m := range repl {
		if ms := spec.Maps[name]; ms != nil {
			ms.MaxEntries, ms.Flags = m.MaxEntries(), m.Flags()
		}
	}
	w := &Watcher{cfg: cfg, log: cfg.Logger, spec: spec, repl: repl, watching: map[bpf.InflightInflightExecKey]identity{},
		runIterFn: func(it *link.Iter) error { return runIter(it, nil) }, blockedWait: blockedWait}
	if err := spec.LoadAndAssign(&w.objs, &ebpf.CollectionOptions{MapReplacements: repl}); err != nil {
		if lerr := kernel.NewLoadError("in-flight", kernel.Probe().Release, err); lerr != nil {
			w.log.Debug("bpf_verifier_log", "object", "in-flight", "log", kernel.VerifierLog(err))
			return nil, lerr
		}
		return nil, fmt.Errorf("load inflight programs: %w", err)
	}
	w.repl["inflight_watch"] = w.objs.InflightWatch
	w.repl["inflight_parked"] = w.objs.InflightParked
	w.repl["inflight_early"] = w.objs.InflightEarly
	if cfg.Exec != nil {
		if err := w.loadLister(); err != nil {
			// Scans then read the map with batch lookups (5.6+), which
			// find the same spans: a fallback, not an error, when the
			// kernel refuses or lacks the iterator (the start's kernel
			// summary says what runs); a warning for anything else.
			switch {
			case errors.Is(err, unix.EPERM):
				w.log.Debug("inflight_lister_fallback", "fallback", "batch lookups of inflight_exec", "reason", "this kernel does not allow the map element iterator (EPERM: lockdown or its configuration)")
			case errors.Is(err, ebpf.ErrNotSupported), errors.Is(err, unix.EOPNOTSUPP):
				w.log.Debug("inflight_lister_fallback", "fallback", "batch lookups of inflight_exec", "reason", "this kernel has no map element iterators (5.9+ with BTF)")
			default:
				w.log.Warn("inflight_lister_load_failed", "error", err, "fallback", "batch lookups of inflight_exec")
			}
		}
	}
	if cfg.Inflight != nil {
		if err := w.addUSDT(USDTMaps{Inflight: cfg.Inflight, Sources: cfg.Sources, TaskStart: cfg.TaskStart, TaskNames: cfg.TaskNames}); err != nil {
			w.Close()
			return nil, err
		}
	}
	w.loadBlocked()
	return w, nil
}

// loadLister loads inflight_list, the iterator that lists inflight_exec's
// old spans in the kernel: map element iterators need 5.9+ and BTF. Seen
// refused with EPERM before verification on a 6.18 host that also refuses
// fentry.
func (w *Watcher) loadLister() error {
	var lo listObjects
	if err := w.spec.LoadAndAssign(&lo, &ebpf.CollectionOptions{MapReplacements: w.repl}); err != nil {
		return fmt.Errorf("load the open span lister: %w", err)
	}
	it, err := link.AttachIter(link.IterOptions{Program: lo.InflightList, Map: w.cfg.Exec})
	lo.InflightList.Close()
	if err != nil {
		lo.InflightCfg.Close()
		return fmt.Errorf("attach the open span lister: %w", err)
	}
	w.list = it
	w.repl["inflight_cfg"] = lo.InflightCfg
	return nil
}

// AddUSDT watches the spans of a USDT tracer too. Only one tracer's.
//
// The watcher keeps its own handles on the tracer's maps (Map.Clone), closed
// by Close: a tracer is closed before the collector that watches it, and a
// scan running meanwhile must not use a closed descriptor (or one the
// process has since reused for another file).
func (w *Watcher) AddUSDT(m USDTMaps) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return errClosed
	}
	if w.task != nil || (w.cfg.Inflight != nil && w.cfg.Inflight != m.Inflight && w.usdtFrom != m.Inflight) {
		return errors.New("inflight watcher: a USDT tracer is watched already")
	}
	from := m.Inflight
	owned, err := cloneMaps(&m.Inflight, &m.Sources, &m.TaskStart, &m.TaskNames)
	if err != nil {
		return fmt.Errorf("inflight watcher: %w", err)
	}
	if err := w.addUSDT(m); err != nil {
		closeMaps(owned)
		return err
	}
	closeMaps(w.usdtOwned)
	w.usdtOwned, w.usdtFrom = owned, from
	w.cfg.Inflight, w.cfg.Sources = m.Inflight, m.Sources
	return nil
}

// cloneMaps replaces each non-nil map with a clone of it and returns the
// clones.
func cloneMaps(ms ...**ebpf.Map) ([]*ebpf.Map, error) {
	var owned []*ebpf.Map
	for _, m := range ms {
		if *m == nil {
			continue
		}
		c, err := (*m).Clone()
		if err != nil {
			closeMaps(owned)
			return nil, fmt.Errorf("clone map %s: %w", (*m).String(), err)
		}
		owned = append(owned, c)
		*m = c
	}
	return owned, nil
}

func closeMaps(ms []*ebpf.Map) {
	for _, m := range ms {
		m.Close()
	}
}

// addUSDT loads the task iterator over usdt_task_start when the tracer
// uses task storage.
func (w *Watcher) addUSDT(m USDTMaps) error {
	if m.Inflight == nil || m.Sources == nil {
		return errors.New("inflight watcher: the usdt_inflight and usdt_sources maps are required")
	}
	if m.TaskStart == nil || m.TaskStart.Type() != ebpf.TaskStorage {
		// Without task storage the USDT object keeps a placeholder
		// there and every span is in usdt_inflight.
		return nil
	}
	if m.TaskNames == nil || m.TaskNames.Type() != ebpf.TaskStorage {
		return errors.New("inflight watcher: usdt_task_names is required with usdt_task_start")
	}
	repl := mapsClone(w.repl)
	repl["usdt_task_start"] = m.TaskStart
	// Spans named by an argument: their names in usdt_task_names, their
	// budgets in budgets (exact names, and globs of names seen before).
	repl["usdt_task_names"] = m.TaskNames
	repl["budgets"] = w.cfg.Budgets
	if w.cfg.Core != nil {
		repl["core"] = w.cfg.Core // which set of budgets is in force
	}
	task := &taskObjects{}
	if err := w.spec.LoadAndAssign(task, &ebpf.CollectionOptions{MapReplacements: repl}); err != nil {
		return fmt.Errorf("load the task iterator (needs kernel 5.11+ and BTF): %w", err)
	}
	it, err := link.AttachIter(link.IterOptions{Program: task.InflightScan})
	if err != nil {
		task.Close()
		return fmt.Errorf("attach task iterator: %w", err)
	}
	w.cfg.TaskStart, w.cfg.TaskNames = m.TaskStart, m.TaskNames
	w.task, w.iter = task, it
	w.repl = repl
	if w.blocked != nil {
		// Reload the blocked sampler so it checks task storage too.
		w.blockedIter.Close()
		w.blocked.Close()
		w.blocked, w.blockedIter = nil, nil
		w.loadBlocked()
	}
	return nil
}

// loadBlocked loads the sampler of blocked threads and parked goroutines,
// sharing inflight_watch with the other programs. It needs kernel 5.18+
// (bpf_copy_from_user_task in a sleepable task iterator); without it, a
// thread that blocked before its span was overdue and stays blocked, and
// a parked goroutine, are not sampled.
func (w *Watcher) loadBlocked() {
	if w.cfg.NoBlocked {
		return
	}
	var objs struct {
		Prog *ebpf.Program `ebpf:"inflight_blocked"`
	}
	if err := w.spec.LoadAndAssign(&objs, &ebpf.CollectionOptions{MapReplacements: w.repl}); err != nil {
		if kernelLacks(err) {
			w.log.Info("inflight_blocked_sampler_unavailable", "error", err, "hint", "needs kernel 5.18+")
		} else {
			// The kernel has what the program needs and refused it:
			// a bug of ours, not the kernel's age.
			w.log.Warn("inflight_blocked_sampler_refused", "error", fmt.Sprintf("%+v", err))
		}
		return
	}
	it, err := link.AttachIter(link.IterOptions{Program: objs.Prog})
	if err != nil {
		objs.Prog.Close()
		w.log.Info("inflight_blocked_sampler_unavailable", "error", err)
		return
	}
	w.blocked, w.blockedIter = objs.Prog, it
}

// runIter runs an iterator and returns what it wrote.
func runIter(it *link.Iter, buf *bytes.Buffer) error {
	rc, err := it.Open()
	if err != nil {
		return err
	}
	defer rc.Close()
	if buf == nil {
		_, err = io.Copy(io.Discard, rc)
		return err
	}
	_, err = buf.ReadFrom(rc)
	return err
}

// Run scans every Interval until ctx is done.
func (w *Watcher) Run(ctx context.Context) error {
	t := time.NewTicker(w.cfg.Interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
		if err := w.Scan(); err != nil {
			if errors.Is(err, errClosed) {
				return nil
			}
			// Log an error once, not every interval.
			if err.Error() != w.lastErr {
				w.log.Warn("inflight_scan_failed", "error", err)
			}
			w.lastErr = err.Error()
			continue
		}
		w.lastErr = ""
	}
}

var errClosed = errors.New("inflight watcher closed")

// scanState is what one scan builds.
type scanState struct {
	now     uint64
	budgets map[uint64]uint64
	targets map[bpf.InflightInflightExecKey]*bpf.InflightInflightTarget
}

// flagNamePrefix is SPAN_F_NAME_PREFIX in bpf/span_event.h.
const flagNamePrefix = uint32(bpf.SpanwatchSpanFlagsSPAN_F_NAME_PREFIX)

// captureUser is BUDGET_CAPTURE_USER: a budget that wants user stacks; the
// samplers take none for the others.
const captureUser = uint32(bpf.SpanwatchBudgetFlagsBUDGET_CAPTURE_USER)

// budget returns a span's budget, looked up once per scan.
func (w *Watcher) budget(st *scanState, id uint64, name *[snapshot.NameLen]int8, flags uint32) uint64 {
	prefix := flags&flagNamePrefix != 0
	key := id
	if prefix {
		key = ^id
	}
	if b, ok := st.budgets[key]; ok {
		return b
	}
	var b uint64
	if w.cfg.Budget != nil {
		b = w.cfg.Budget(id, snapshot.NameString(unsafe.Slice((*byte)(unsafe.Pointer(&name[0])), len(name))), prefix)
	} else {
		var v bpf.SpanwatchBudget
		if err := w.cfg.Budgets.Lookup(&bpf.SpanwatchBudgetKey{NameId: id}, &v); err == nil && v.Flags&captureUser != 0 {
			b = v.BudgetNs
		}
	}
	st.budgets[key] = b
	return b
}

// add records an overdue span of the thread of execution k.
func (w *Watcher) add(st *scanState, k bpf.InflightInflightExecKey, flags uint32, s bpf.InflightInflightTspan) {
	t := st.targets[k]
	if t == nil {
		t = &bpf.InflightInflightTarget{Pid: k.Tgid, Flags: flags, Samples: int32(w.cfg.Samples), PeriodNs: uint64(time.Second) / w.cfg.Frequency}
		st.targets[k] = t
	}
	if t.Nspans < targetSpans {
		t.Spans[t.Nspans] = s
		t.Nspans++
	}
}

// Scan finds the in-flight spans over their budgets, hands the threads and
// goroutines that run them to the samplers, retires those whose spans
// ended, and attaches the samplers only while some have samples left.
func (w *Watcher) Scan() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return errClosed
	}
	now, err := monotonicNs()
	if err != nil {
		return err
	}
	st := &scanState{now: now, budgets: map[uint64]uint64{}, targets: map[bpf.InflightInflightExecKey]*bpf.InflightInflightTarget{}}
	if w.cfg.Exec != nil {
		if err := w.scanSDK(st); err != nil {
			return err
		}
	}
	if w.cfg.Inflight != nil {
		if err := w.scanUSDT(st); err != nil {
			return err
		}
	}
	// Write new targets; a target with the same spans keeps its samples
	// count, so a span is sampled Samples times, not more.
	for k, t := range st.targets {
		id := identityOf(t)
		if old, ok := w.watching[k]; ok && old == id {
			continue
		}
		if err := w.objs.InflightWatch.Put(&k, t); err != nil {
			return fmt.Errorf("watch %d/%#x: %w", k.Tgid, k.Exec, err)
		}
		w.watching[k] = id
	}
	for k := range w.watching {
		if st.targets[k] == nil {
			w.objs.InflightWatch.Delete(&k)
			delete(w.watching, k)
		}
	}
	if w.task != nil {
		if err := w.scanTasks(st); err != nil {
			return err
		}
	}
	if err := w.writeParked(st); err != nil {
		return err
	}
	// Sample while some entry, ours or the iterator's, has samples left.
	active := false
	var (
		k bpf.InflightInflightExecKey
		t bpf.InflightInflightTarget
	)
	for it := w.objs.InflightWatch.Iterate(); it.Next(&k, &t); {
		if t.Samples > 0 {
			active = true
			break
		}
	}
	// Spans sampled from their start need the CPU clock all along.
	active = active || len(w.early) > 0
	if err := w.setActive(active); err != nil {
		return err
	}
	if active && w.blockedIter != nil {
		if err := w.runBlocked(); err != nil {
			return fmt.Errorf("sample blocked threads: %w", err)
		}
	}
	return nil
}

// blockedWait bounds a run of the blocked sampler. It reads other
// processes' memory, faulting pages in, only in areas that cannot wait for
// anyone but the kernel (anonymous memory, files of local file systems:
// remote_area in bpf/inflight.h); an area a process remaps between that
// look and the read could still hold a page whose fault waits for a FUSE
// daemon or a network server.
const blockedWait = 5 * time.Second

// runBlocked runs the blocked sampler, waiting at most blockedWait. A run
// that takes longer is left to finish on its own (a thread of the agent
// stays in the kernel until the page arrives or the agent exits) and the
// sampler is given up: a process's user must not be able to hold the
// watcher, and the reloads and shutdown that wait for its lock.
func (w *Watcher) runBlocked() error {
	it, prog := w.blockedIter, w.blocked
	done := make(chan error, 1)
	go func() { done <- w.runIterFn(it) }()
	t := time.NewTimer(w.blockedWait)
	defer t.Stop()
	select {
	case err := <-done:
		return err
	case <-t.C:
	}
	w.log.Warn("inflight_blocked_sampler_stuck", "waited", w.blockedWait,
		"effect", "threads that stay blocked and parked goroutines are no longer sampled (restart the agent to sample them again); one thread of the agent waits in the kernel until the read returns",
		"hint", "a process's memory the sampler read waits for a page that does not arrive: a FUSE or network file mapped where a stack was")
	w.blocked, w.blockedIter = nil, nil
	go func() {
		<-done
		it.Close()
		prog.Close()
	}()
	return nil
}

// scanSDK lists the SDKs' open spans older than the smallest budget with
// inflight_list and keeps those over their own.
func (w *Watcher) scanSDK(st *scanState) error {
	minAge := w.minBudget()
	if minAge == 0 {
		return nil // no budgets: nothing can be overdue
	}
	if w.list == nil {
		return w.scanSDKBatch(st, minAge)
	}
	if minAge != w.minAge {
		if err := w.repl["inflight_cfg"].Put(uint32(0), minAge); err != nil {
			return fmt.Errorf("write the lister's least age: %w", err)
		}
		w.minAge = minAge
	}
	var buf bytes.Buffer
	if err := runIter(w.list, &buf); err != nil {
		return fmt.Errorf("list open spans: %w", err)
	}
	b := buf.Bytes()
	size := int(unsafe.Sizeof(bpf.InflightInflightCandidate{}))
	for ; len(b) >= size; b = b[size:] {
		c := (*bpf.InflightInflightCandidate)(unsafe.Pointer(&b[0]))
		budget := w.budget(st, c.NameId, &c.Name, c.Flags)
		if budget == 0 || st.now < c.StartNs || st.now-c.StartNs <= budget {
			continue
		}
		w.addSDK(st, c.Key, c.Goroutine != 0, bpf.InflightInflightTspan{
			StartNs: c.StartNs, StartReal: c.StartReal, NameId: c.NameId, BudgetNs: budget,
			Slot: c.Slot, Source: c.Source, Name: c.Name,
		})
	}
	return nil
}

func (w *Watcher) addSDK(st *scanState, k bpf.InflightInflightExecKey, goroutine bool, s bpf.InflightInflightTspan) {
	flags := uint32(targetSDK)
	if goroutine {
		flags |= targetGoroutine
	}
	w.add(st, k, flags, s)
}

// batchSize is how many inflight_exec entries a batch lookup reads.
const batchSize = 256

// scanSDKBatch is scanSDK where the lister does not load: it reads every
// thread of execution's stack of open spans with batch lookups (kernel
// 5.6+), a copy of the map's live entries per scan. So that the copy stays
// the size of what runs, entries with no span open are deleted (the next
// start on that goroutine or thread inserts its entry again): a span that
// starts between the read and the delete is not sampled.
func (w *Watcher) scanSDKBatch(st *scanState, minAge uint64) error {
	if w.batchKeys == nil {
		w.batchKeys = make([]bpf.InflightInflightExecKey, batchSize)
		w.batchVals = make([]bpf.InflightInflightStack, batchSize)
	}
	idle := w.idle[:0]
	defer func() { w.idle = idle[:0] }()
	var cursor ebpf.MapBatchCursor
	for {
		n, err := w.cfg.Exec.BatchLookup(&cursor, w.batchKeys, w.batchVals, nil)
		for i := 0; i < n; i++ {
			e := &w.batchVals[i]
			if e.Depth == 0 {
				idle = append(idle, w.batchKeys[i])
				continue
			}
			for d := 0; d < int(min(e.Depth, uint32(len(e.Spans)))); d++ {
				o := &e.Spans[d]
				if st.now < o.StartNs || st.now-o.StartNs < minAge {
					continue
				}
				budget := w.budget(st, o.NameId, &o.Name, o.Flags)
				if budget == 0 || st.now-o.StartNs <= budget {
					continue
				}
				w.addSDK(st, w.batchKeys[i], e.Goroutine != 0, bpf.InflightInflightTspan{
					StartNs: o.StartNs, StartReal: o.StartReal, NameId: o.NameId, BudgetNs: budget,
					Slot: uint32(d), Source: o.Source, Name: o.Name,
				})
			}
		}
		if errors.Is(err, ebpf.ErrKeyNotExist) {
			break
		}
		if err != nil {
			return fmt.Errorf("read open spans: %w", err)
		}
	}
	if len(idle) > 0 {
		if _, err := w.cfg.Exec.BatchDelete(idle, nil); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
			for _, k := range idle { // one by one where batches are refused
				w.cfg.Exec.Delete(&k)
			}
		}
	}
	return nil
}

// minBudget returns the smallest budget any span may have.
func (w *Watcher) minBudget() uint64 {
	if w.cfg.MinBudget != nil {
		return w.cfg.MinBudget()
	}
	var (
		k   bpf.SpanwatchBudgetKey
		b   bpf.SpanwatchBudget
		min uint64
	)
	for it := w.cfg.Budgets.Iterate(); it.Next(&k, &b); {
		if k.Set == 0 && b.BudgetNs != 0 && b.Flags&captureUser != 0 && (min == 0 || b.BudgetNs < min) {
			min = b.BudgetNs
		}
	}
	return min
}

// scanUSDT finds the USDT spans in usdt_inflight paired by thread that are
// over their budgets.
func (w *Watcher) scanUSDT(st *scanState) error {
	sources := map[uint32]*bpf.UsdtUsdtSource{}
	var (
		k bpf.UsdtUsdtInflightKey
		v bpf.UsdtUsdtInflight
	)
	it := w.cfg.Inflight.Iterate()
	for it.Next(&k, &v) {
		src, ok := sources[k.Source]
		if !ok {
			var s bpf.UsdtUsdtSource
			if err := w.cfg.Sources.Lookup(k.Source, &s); err == nil {
				src = &s
			}
			sources[k.Source] = src
		}
		if src == nil || src.KeyArg != noArg {
			continue // paired by an argument: no thread to sample
		}
		name := src.Name
		if src.NameArg != noArg {
			name = v.Name
		}
		id := snapshot.NameIDBytes((*[snapshot.NameLen]byte)(unsafe.Pointer(&name)))
		budget := w.budget(st, id, &name, 0)
		if budget == 0 || st.now < v.StartNs || st.now-v.StartNs <= budget {
			continue
		}
		w.add(st, bpf.InflightInflightExecKey{Tgid: k.Tgid, Exec: uint64(uint32(k.Key))}, 0, bpf.InflightInflightTspan{
			StartNs: v.StartNs, NameId: id, BudgetNs: budget, Source: sourceUSDT, Name: name,
		})
	}
	if err := it.Err(); err != nil {
		return fmt.Errorf("scan usdt_inflight: %w", err)
	}
	return nil
}

// scanTasks writes the span and budget of each USDT source paired by
// thread into inflight_slots and runs the task iterator, which puts
// threads whose stack of open spans (usdt_task_start) holds spans over
// their budgets in inflight_watch. Sources named by an argument get no
// name or budget here: the iterator reads their names from
// usdt_task_names and their budgets from budgets. w.mu is held.
func (w *Watcher) scanTasks(st *scanState) error {
	n := int(w.cfg.Sources.MaxEntries())
	if len(w.srcBuf) != n {
		w.srcBuf = make([]bpf.UsdtUsdtSource, n)
	}
	keys := make([]uint32, n)
	var cursor ebpf.MapBatchCursor
	got, err := w.cfg.Sources.BatchLookup(&cursor, keys, w.srcBuf, nil)
	if err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
		return fmt.Errorf("read usdt sources: %w", err)
	}
	if w.slots == nil {
		w.slots = map[uint32]bpf.InflightInflightSlot{}
	}
	period := uint64(time.Second) / w.cfg.Frequency
	for j := 0; j < got; j++ {
		i, src := keys[j], &w.srcBuf[j]
		var slot bpf.InflightInflightSlot
		switch {
		case src.KeyArg != noArg:
		case src.NameArg == noArg && src.Name[0] != 0:
			id := snapshot.NameIDBytes((*[snapshot.NameLen]byte)(unsafe.Pointer(&src.Name)))
			slot = bpf.InflightInflightSlot{BudgetNs: w.budget(st, id, &src.Name, 0), NameId: id, Samples: int32(w.cfg.Samples),
				PeriodNs: period, Name: src.Name}
		case src.NameArg != noArg:
			slot = bpf.InflightInflightSlot{Samples: int32(w.cfg.Samples), PeriodNs: period}
		}
		if slot == w.slots[i] {
			continue
		}
		if err := w.task.InflightSlots.Put(i, &slot); err != nil {
			return fmt.Errorf("write task slot %d: %w", i, err)
		}
		w.slots[i] = slot
	}
	if err := runIter(w.iter, nil); err != nil {
		return fmt.Errorf("run task iterator: %w", err)
	}
	return nil
}

// writeParked lists the watched goroutines with samples left for the
// blocked sampler, which samples those the Go scheduler parked: all of
// them at each scan, up to maxParked, those with the most samples left
// first, so that a goroutine newly over its budget is sampled beside
// goroutines stuck for long (whose samples run down), and past maxParked
// the list turns over from scan to scan.
func (w *Watcher) writeParked(st *scanState) error {
	type entry struct {
		k    bpf.InflightInflightExecKey
		left int32
	}
	var list []entry
	for k, t := range st.targets {
		if t.Flags&targetGoroutine == 0 {
			continue
		}
		var cur bpf.InflightInflightTarget
		if err := w.objs.InflightWatch.Lookup(&k, &cur); err != nil || cur.Samples <= 0 {
			continue // gone (LRU) or sampled as often as asked
		}
		list = append(list, entry{k, cur.Samples})
	}
	slices.SortFunc(list, func(a, b entry) int {
		if c := cmp.Compare(b.left, a.left); c != 0 {
			return c
		}
		if c := cmp.Compare(a.k.Tgid, b.k.Tgid); c != 0 {
			return c
		}
		return cmp.Compare(a.k.Exec, b.k.Exec)
	})
	n := min(len(list), maxParked)
	for i, e := range list[:n] {
		if err := w.objs.InflightParked.Put(uint32(i), &e.k); err != nil {
			return fmt.Errorf("list parked goroutines: %w", err)
		}
	}
	for i := n; i < w.parked; i++ {
		if err := w.objs.InflightParked.Put(uint32(i), &bpf.InflightInflightExecKey{}); err != nil {
			return fmt.Errorf("list parked goroutines: %w", err)
		}
	}
	w.parked = n
	return nil
}

// MaxEarly is how many span names SetEarly takes.
const MaxEarly = int(bpf.InflightInflightWatchSizesINFLIGHT_MAX_EARLY)

// SetEarly sets the spans sampled from their start rather than from their
// budget on: budgets by exact span name, as the span's start event names
// it. Only the SDKs' spans (inflight_exec), and only on the CPU: off the
// CPU and for USDT spans sampling begins past the budget as for the
// others. While the set is not empty the CPU clock stays attached to every
// CPU and each tick that finds a thread (or goroutine) with such a span
// open takes its stack; the collector's Joiner keeps the samples of a span
// that ends over its budget and drops those of one that does not. The
// next Scan attaches or detaches the samplers. An empty or nil set turns
// it off.
func (w *Watcher) SetEarly(budgets map[string]time.Duration) error {
	if len(budgets) > MaxEarly {
		return fmt.Errorf("inflight watcher: %d spans sampled from their start, at most %d", len(budgets), MaxEarly)
	}
	want := make(map[uint64]uint64, len(budgets))
	for name, b := range budgets {
		if b <= 0 {
			return fmt.Errorf("inflight watcher: span %q sampled from its start: budget %v, want more than 0", name, b)
		}
		want[snapshot.NameID(name)] = uint64(b)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return errClosed
	}
	for id := range w.early {
		if _, ok := want[id]; !ok {
			if err := w.objs.InflightEarly.Delete(id); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
				return fmt.Errorf("inflight watcher: forget early span %#x: %w", id, err)
			}
			delete(w.early, id)
		}
	}
	if w.early == nil {
		w.early = map[uint64]uint64{}
	}
	for id, b := range want {
		if w.early[id] == b {
			continue
		}
		if err := w.objs.InflightEarly.Put(id, b); err != nil {
			return fmt.Errorf("inflight watcher: write early span %#x: %w", id, err)
		}
		w.early[id] = b
	}
	return nil
}

// Watching returns the number of threads and goroutines being sampled.
func (w *Watcher) Watching() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.watching)
}

// setActive attaches or detaches the samplers. w.mu is held.
func (w *Watcher) setActive(on bool) error {
	active := w.offCPU != nil || w.perfFDs != nil
	if on == active {
		return nil
	}
	if !on {
		w.detach()
		return nil
	}
	if !w.cfg.NoOffCPU {
		l, err := link.AttachRawTracepoint(link.RawTracepointOptions{Name: "sched_switch", Program: w.objs.InflightOffCpu})
		if err != nil {
			return fmt.Errorf("attach sched_switch sampler: %w", err)
		}
		w.offCPU = l
	}
	if !w.cfg.NoOnCPU {
		ncpu, err := ebpf.PossibleCPU()
		if err != nil {
			w.detach()
			return err
		}
		w.perfFDs = []int{}
		for cpu := 0; cpu < ncpu; cpu++ {
			attr := unix.PerfEventAttr{
				Type:   unix.PERF_TYPE_SOFTWARE,
				Config: unix.PERF_COUNT_SW_CPU_CLOCK,
				Size:   uint32(unsafe.Sizeof(unix.PerfEventAttr{})),
				Sample: w.cfg.Frequency,
				Bits:   unix.PerfBitFreq | unix.PerfBitDisabled,
			}
			fd, err := unix.PerfEventOpen(&attr, -1, cpu, -1, unix.PERF_FLAG_FD_CLOEXEC)
			if errors.Is(err, unix.ENODEV) {
				continue // an offline CPU
			}
			if err != nil {
				w.detach()
				return fmt.Errorf("open cpu clock on cpu %d: %w", cpu, err)
			}
			w.perfFDs = append(w.perfFDs, fd)
			if err := unix.IoctlSetInt(fd, unix.PERF_EVENT_IOC_SET_BPF, w.objs.InflightOnCpu.FD()); err != nil {
				w.detach()
				return fmt.Errorf("attach on-cpu sampler on cpu %d: %w", cpu, err)
			}
			if err := unix.IoctlSetInt(fd, unix.PERF_EVENT_IOC_ENABLE, 0); err != nil {
				w.detach()
				return fmt.Errorf("enable cpu clock on cpu %d: %w", cpu, err)
			}
		}
	}
	return nil
}

func (w *Watcher) detach() {
	if w.offCPU != nil {
		w.offCPU.Close()
		w.offCPU = nil
	}
	for _, fd := range w.perfFDs {
		unix.Close(fd)
	}
	w.perfFDs = nil
}

// Active reports whether the samplers are attached.
func (w *Watcher) Active() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.offCPU != nil || w.perfFDs != nil
}

// SamplesBlocked reports whether the sampler of blocked threads and
// parked goroutines runs (a sleepable task iterator, kernel 5.18+); where
// it does not, a span that waits off the CPU is sampled only when its
// thread blocks while watched.
func (w *Watcher) SamplesBlocked() bool { return w.blockedIter != nil }

// Close detaches and unloads the samplers. It may be called more than once.
func (w *Watcher) Close() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return nil
	}
	w.closed = true
	w.detach()
	errs := []error{w.objs.Close()}
	if w.list != nil {
		errs = append(errs, w.list.Close(), w.repl["inflight_cfg"].Close())
	}
	if w.iter != nil {
		errs = append(errs, w.iter.Close())
	}
	if w.task != nil {
		errs = append(errs, w.task.Close())
	}
	if w.blockedIter != nil {
		errs = append(errs, w.blockedIter.Close(), w.blocked.Close())
	}
	closeMaps(w.usdtOwned)
	w.usdtOwned = nil
	return errors.Join(errs...)
}

func monotonicNs() (uint64, error) {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
		return 0, fmt.Errorf("read monotonic clock: %w", err)
	}
	return uint64(ts.Nano()), nil
}

func mapsClone(m map[string]*ebpf.Map) map[string]*ebpf.Map {
	out := make(map[string]*ebpf.Map, len(m)+1)
	for k, v := range m {
		out[k] = v
	}
	return out
}

// kernelLacks reports whether a load error says the kernel lacks a
// helper, program type or attach type the program needs (so its age is
// the reason), rather than the verifier refusing a program it could run.
func kernelLacks(err error) bool {
	if errors.Is(err, ebpf.ErrNotSupported) {
		return true
	}
	var ve *ebpf.VerifierError
	if !errors.As(err, &ve) {
		return errors.Is(err, unix.EINVAL) // an unknown program or attach type
	}
	for _, l := range ve.Log {
		if strings.Contains(l, "unknown func") || strings.Contains(l, "program of this type cannot use helper") {
			return true
		}
	}
	return false
}
