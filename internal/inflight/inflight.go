//go:build linux

package inflight

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"time"
	"unsafe"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"

	"github.com/spanwatch/spanwatch/bpf"
	"github.com/spanwatch/spanwatch/snapshot"
)

// StatusStillRunning is set in an overrun record's status (struct overrun,
// bpf/aggregate.h) by a sample of a span that had not ended: the collector
// sets snapshot.Overrun.StillRunning from it, and must test the error bit
// (status & 1) rather than status != 0. It matches OVERRUN_STILL_RUNNING in
// bpf/inflight.bpf.c.
const StatusStillRunning = 0x80000000

// DecodeStatus splits an overrun record's status into the span's error
// flag and whether it was sampled still running.
func DecodeStatus(status uint32) (spanError, stillRunning bool) {
	return status&^StatusStillRunning != 0, status&StatusStillRunning != 0
}

// sourceUSDT is SOURCE_USDT in bpf/aggregate.h.
const sourceUSDT = 3

// noArg is USDT_NO_ARG in bpf/usdt.bpf.c: the source does not take the
// name or the pairing key from an argument.
const noArg = 0xff

// Config configures a Watcher. Inflight, Sources, Budgets and Overruns are
// required: the maps of the loaded USDT object (usdt_inflight,
// usdt_sources) and of the core (budgets, overruns).
type Config struct {
	Logger   *slog.Logger
	Inflight *ebpf.Map
	Sources  *ebpf.Map
	Budgets  *ebpf.Map
	Overruns *ebpf.Map
	// Counters is the core's counters map, where ring buffer drops are
	// counted; the watcher's own when nil.
	Counters *ebpf.Map
	// TaskStart and TaskNames are the USDT object's usdt_task_start and
	// usdt_task_names, where spans paired by thread keep their starts
	// (and names read from an argument) in task storage (5.11+); nil when
	// they are not in use. A task iterator scans them.
	TaskStart *ebpf.Map
	TaskNames *ebpf.Map
	// Interval is how often the in-flight spans are scanned; 100ms when
	// zero. A stuck span is sampled within about Interval of its budget.
	Interval time.Duration
	// Samples is the number of stacks taken of each overdue span; 1 when
	// zero. Each is one overrun record.
	Samples int
	// Frequency is the on-CPU sampling rate in Hz while a thread is
	// watched; 99 when zero.
	Frequency uint64
	// NoOnCPU, NoOffCPU and NoBlocked turn off one of the samplers: the
	// CPU clock, sched_switch, and the iterator that samples threads that
	// stay blocked (kernel 5.18+; left out where it does not load).
	NoOnCPU, NoOffCPU, NoBlocked bool
}

// A Watcher samples threads whose spans run past their budgets.
type Watcher struct {
	cfg  Config
	log  *slog.Logger
	objs objects
	task *taskObjects // nil without Config.TaskStart
	iter *link.Iter
	// blocked samples watched threads that sleep; nil when off or not
	// supported.
	blocked     *ebpf.Program
	blockedIter *link.Iter
	slots       map[uint32]bpf.InflightInflightSlot // as last written, by source
	srcBuf      []bpf.UsdtUsdtSource

	mu       sync.Mutex
	watching map[uint32]spanKey // tid -> the span being sampled
	reported map[uint32]spanKey // tid -> a span already sampled, still running
	offCPU   link.Link
	perfFDs  []int
	closed   bool
	lastErr  string
}

// objects are what the watcher loads of bpf/inflight.bpf.c.
type objects struct {
	InflightOnCpu  *ebpf.Program `ebpf:"inflight_on_cpu"`
	InflightOffCpu *ebpf.Program `ebpf:"inflight_off_cpu"`
	InflightWatch  *ebpf.Map     `ebpf:"inflight_watch"`
}

func (o *objects) Close() error {
	return errors.Join(o.InflightOnCpu.Close(), o.InflightOffCpu.Close(), o.InflightWatch.Close())
}

// taskObjects scan usdt_task_start.
type taskObjects struct {
	InflightScan  *ebpf.Program `ebpf:"inflight_scan"`
	InflightSlots *ebpf.Map     `ebpf:"inflight_slots"`
}

func (o *taskObjects) Close() error {
	return errors.Join(o.InflightScan.Close(), o.InflightSlots.Close())
}

// spanKey tells one in-flight span of a thread from the next.
type spanKey struct {
	tgid    uint32
	startNs uint64
}

// New loads the sampling programs. They are attached only while a thread
// is watched.
func New(cfg Config) (*Watcher, error) {
	if cfg.Inflight == nil || cfg.Sources == nil || cfg.Budgets == nil || cfg.Overruns == nil {
		return nil, errors.New("inflight watcher: the usdt_inflight, usdt_sources, budgets and overruns maps are required")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Interval == 0 {
		cfg.Interval = 100 * time.Millisecond
	}
	if cfg.Samples == 0 {
		cfg.Samples = 1
	}
	if cfg.Frequency == 0 {
		cfg.Frequency = 99
	}
	spec, err := bpf.LoadInflight()
	if err != nil {
		return nil, fmt.Errorf("load inflight spec: %w", err)
	}
	// The core's maps come from aggregate.h; only those the programs use
	// (the ring buffer and the counters) are loaded, both replaced.
	repl := map[string]*ebpf.Map{"overruns": cfg.Overruns}
	if cfg.Counters != nil {
		repl["counters"] = cfg.Counters
	}
	if cfg.TaskStart != nil && cfg.TaskStart.Type() != ebpf.TaskStorage {
		// Without task storage the USDT object keeps a placeholder
		// there and every span is in usdt_inflight.
		cfg.TaskStart = nil
	}
	w := &Watcher{cfg: cfg, log: cfg.Logger, watching: map[uint32]spanKey{}, reported: map[uint32]spanKey{}}
	if cfg.TaskStart == nil {
		if err := spec.LoadAndAssign(&w.objs, &ebpf.CollectionOptions{MapReplacements: repl}); err != nil {
			return nil, fmt.Errorf("load inflight programs: %w", err)
		}
		w.loadBlocked(spec, repl)
		return w, nil
	}
	if cfg.TaskNames == nil || cfg.TaskNames.Type() != ebpf.TaskStorage {
		return nil, errors.New("inflight watcher: usdt_task_names is required with usdt_task_start")
	}
	repl["usdt_task_start"] = cfg.TaskStart
	repl["usdt_task_names"] = cfg.TaskNames
	repl["budgets"] = cfg.Budgets
	w.task = &taskObjects{}
	all := struct {
		*objects
		*taskObjects
	}{&w.objs, w.task}
	if err := spec.LoadAndAssign(&all, &ebpf.CollectionOptions{MapReplacements: repl}); err != nil {
		return nil, fmt.Errorf("load inflight programs with the task iterator (needs kernel 5.11+ and BTF): %w", err)
	}
	it, err := link.AttachIter(link.IterOptions{Program: w.task.InflightScan})
	if err != nil {
		w.objs.Close()
		w.task.Close()
		return nil, fmt.Errorf("attach task iterator: %w", err)
	}
	w.iter = it
	w.loadBlocked(spec, repl)
	return w, nil
}

// loadBlocked loads the sampler of blocked threads, sharing inflight_watch
// with the other programs. It needs kernel 5.18+ (bpf_copy_from_user_task
// in a sleepable task iterator); without it, a thread that blocked before
// its span was overdue and stays blocked is not sampled.
func (w *Watcher) loadBlocked(spec *ebpf.CollectionSpec, repl map[string]*ebpf.Map) {
	if w.cfg.NoBlocked {
		return
	}
	r := map[string]*ebpf.Map{"inflight_watch": w.objs.InflightWatch}
	for k, v := range repl {
		r[k] = v
	}
	var objs struct {
		Prog *ebpf.Program `ebpf:"inflight_blocked"`
	}
	if err := spec.LoadAndAssign(&objs, &ebpf.CollectionOptions{MapReplacements: r}); err != nil {
		w.log.Info("inflight_blocked_sampler_unavailable", "error", err, "hint", "needs kernel 5.18+")
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

// runIter runs a task iterator over every task.
func runIter(it *link.Iter) error {
	rc, err := it.Open()
	if err != nil {
		return err
	}
	defer rc.Close()
	_, err = io.Copy(io.Discard, rc)
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

// Scan finds the in-flight spans over their budgets, hands new ones to the
// samplers, retires those sampled or ended, and attaches the samplers only
// while some thread is watched.
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
	sources := map[uint32]*bpf.UsdtUsdtSource{}
	budgets := map[uint64]uint64{}
	overdue := map[uint32]spanKey{}
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
		nameBytes := (*[snapshot.NameLen]byte)(unsafe.Pointer(&name))
		id := snapshot.NameIDBytes(nameBytes)
		budget, ok := budgets[id]
		if !ok {
			var b bpf.SpanwatchBudget
			if err := w.cfg.Budgets.Lookup(id, &b); err == nil {
				budget = b.BudgetNs
			}
			budgets[id] = budget
		}
		if budget == 0 || now < v.StartNs || now-v.StartNs <= budget {
			continue
		}
		tid := uint32(k.Key)
		key := spanKey{tgid: k.Tgid, startNs: v.StartNs}
		overdue[tid] = key
		if w.reported[tid] == key || w.watching[tid] == key {
			continue
		}
		target := bpf.InflightInflightTarget{
			StartNs: v.StartNs, NameId: id, BudgetNs: budget,
			Pid: k.Tgid, Source: sourceUSDT, Samples: int32(w.cfg.Samples),
			Name: name,
		}
		if err := w.objs.InflightWatch.Put(tid, &target); err != nil {
			return fmt.Errorf("watch thread %d: %w", tid, err)
		}
		w.watching[tid] = key
	}
	if err := it.Err(); err != nil {
		return fmt.Errorf("scan usdt_inflight: %w", err)
	}
	if w.task != nil {
		if err := w.scanTasks(budgets); err != nil {
			return err
		}
	}
	for tid, key := range w.watching {
		var t bpf.InflightInflightTarget
		err := w.objs.InflightWatch.Lookup(tid, &t)
		switch {
		case err == nil && t.Samples <= 0:
			w.reported[tid] = key // sampled: never again for this span
		case err == nil && overdue[tid] == key:
			continue // still waiting for its samples
		}
		w.objs.InflightWatch.Delete(tid)
		delete(w.watching, tid)
	}
	for tid, key := range w.reported {
		if overdue[tid] != key {
			delete(w.reported, tid) // the span ended
		}
	}
	// Sample while some entry, ours or the iterator's, has samples left.
	active := false
	var (
		tid uint32
		t   bpf.InflightInflightTarget
	)
	for it := w.objs.InflightWatch.Iterate(); it.Next(&tid, &t); {
		if t.Samples > 0 {
			active = true
			break
		}
	}
	if err := w.setActive(active); err != nil {
		return err
	}
	if active && w.blockedIter != nil {
		if err := runIter(w.blockedIter); err != nil {
			return fmt.Errorf("sample blocked threads: %w", err)
		}
	}
	return nil
}

// scanTasks writes the span and budget of each source paired by thread
// with a fixed name into inflight_slots, and runs the task iterator,
// which puts threads whose stack of open spans holds one over its budget
// in inflight_watch (spans named by an argument are looked up there).
// w.mu is held.
func (w *Watcher) scanTasks(budgets map[uint64]uint64) error {
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
	for j := 0; j < got; j++ {
		i, src := keys[j], &w.srcBuf[j]
		var slot bpf.InflightInflightSlot
		if src.Name[0] != 0 && src.KeyArg == noArg && src.NameArg == noArg {
			id := snapshot.NameIDBytes((*[snapshot.NameLen]byte)(unsafe.Pointer(&src.Name)))
			budget, ok := budgets[id]
			if !ok {
				var b bpf.SpanwatchBudget
				if err := w.cfg.Budgets.Lookup(id, &b); err == nil {
					budget = b.BudgetNs
				}
				budgets[id] = budget
			}
			slot = bpf.InflightInflightSlot{BudgetNs: budget, NameId: id, Samples: int32(w.cfg.Samples), Name: src.Name}
		} else if src.KeyArg == noArg && src.NameArg != noArg {
			slot = bpf.InflightInflightSlot{Samples: int32(w.cfg.Samples)} // budget by name, in the kernel
		}
		if slot == w.slots[i] {
			continue
		}
		if err := w.task.InflightSlots.Put(i, &slot); err != nil {
			return fmt.Errorf("write task slot %d: %w", i, err)
		}
		w.slots[i] = slot
	}
	if err := runIter(w.iter); err != nil {
		return fmt.Errorf("run task iterator: %w", err)
	}
	return nil
}

// Watching returns the number of threads being sampled.
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
	if w.iter != nil {
		errs = append(errs, w.iter.Close())
	}
	if w.task != nil {
		errs = append(errs, w.task.Close())
	}
	if w.blockedIter != nil {
		errs = append(errs, w.blockedIter.Close(), w.blocked.Close())
	}
	return errors.Join(errs...)
}

func monotonicNs() (uint64, error) {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
		return 0, fmt.Errorf("read monotonic clock: %w", err)
	}
	return uint64(ts.Nano()), nil
}
