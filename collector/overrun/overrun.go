// Package overrun is the collector's overrun pipeline: it reads the
// records the kernel writes to the overruns ring buffer (a span over its
// budget, or an in-span sample of one still running), joins the samples
// with their span's end, names stacks and cgroups, and keeps what a
// snapshot takes. Its reading goroutine only copies each record into a
// bounded queue, so that nothing behind it (symbolizing, cgroup names, an
// OnOverrun that writes to disk) backs up into the ring buffer.
package overrun

import (
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/ringbuf"
	"golang.org/x/sys/unix"

	"github.com/spanwatch/spanwatch/bpf"
	"github.com/spanwatch/spanwatch/internal/inflight"
	"github.com/spanwatch/spanwatch/internal/symbolize"
	"github.com/spanwatch/spanwatch/snapshot"
)

const sourceMarker = uint32(bpf.SpanwatchSpanSourceSOURCE_MARKER)

var sourceNames = map[uint32]string{
	uint32(bpf.SpanwatchSpanSourceSOURCE_USER_EVENTS): "user_events",
	sourceMarker: "marker",
	uint32(bpf.SpanwatchSpanSourceSOURCE_USDT):              "usdt",
	uint32(bpf.SpanwatchSpanSourceSOURCE_EVENTHEADER):       "eventheader",
	uint32(bpf.SpanwatchSpanSourceSOURCE_USER_EVENT_FIELDS): "user_event_fields",
	uint32(bpf.SpanwatchSpanSourceSOURCE_FUNCTIONS):         "functions",
}

// DefaultQueue is how many overrun records wait between the ring buffer's
// reader and the worker by default (Config.Queue).
const DefaultQueue = 1024

// Config configures a Reader.
type Config struct {
	Logger *slog.Logger
	// OnOverrun, when set, is called for each overrun as it arrives, on
	// the worker (never on the ring buffer's reader), before it is kept
	// for the next Take.
	OnOverrun func(snapshot.Overrun)
	// Queue is how many records wait for the worker (DefaultQueue when 0
	// or less); records that find it full are counted (Take's
	// queueDropped).
	Queue int
	// Keep is how many overruns Take returns at most, with the stack
	// detail whole (SetStackDetail); more are counted as dropped.
	Keep int
	// Symbolizer names the stacks; it must be set.
	Symbolizer Symbolizer
	// Identify names a cgroup (its path, container, pod, unit and
	// process), as the collector names its series; tgid is the series
	// key's (the record's Tgid): the process's, where the kernel keeps the
	// cgroup's series per process, else 0. nil leaves overruns with their
	// cgroup id only.
	Identify func(cgroupID uint64, tgid uint32) snapshot.Identity
	// Names names the spans whose names the kernel could not read and the
	// values of label sets; nil leaves them as the record has them.
	Names Names
}

// A Symbolizer turns stack addresses into frames. Capture is called as soon
// as an overrun arrives, while the process is most likely alive.
// *symbolize.Symbolizer is one.
type Symbolizer interface {
	Capture(pid uint32) error
	User(pid uint32, addrs []uint64) ([]snapshot.Frame, error)
	Kernel(addrs []uint64) ([]snapshot.Frame, error)
}

// Names is what the collector knows of names and labels that a record
// holds by id.
type Names interface {
	// ResolveName returns the name a placeholder name stands for.
	ResolveName(name string) (string, bool)
	// Labels names the values of a label set.
	Labels(set uint16, vals []uint64, other uint8) map[string]string
}

// Read errors other than a closed reader are retried after a pause that
// doubles from readBackoffMin up to readBackoffMax, so a reader that keeps
// failing does not spin on a CPU.
const (
	readBackoffMin = 10 * time.Millisecond
	readBackoffMax = time.Second
)

// RecordReader is what the overrun reader reads: a *ringbuf.Reader.
type RecordReader interface {
	ReadInto(*ringbuf.Record) error
	Close() error
}

// A Reader reads overrun records from the ring buffer as they arrive.
// Its reading goroutine only copies each record into a bounded queue and
// reads on, so that nothing behind it (symbolizing, cgroup names, an
// OnOverrun that writes to disk) can back up into the ring buffer, where a
// full buffer loses records in the kernel. One worker decodes, joins,
// symbolizes and delivers what is queued; what finds the queue full is
// dropped there and counted (Stats.OverrunsQueueDropped).
type Reader struct {
	rd     RecordReader
	cfg    Config
	log    *slog.Logger
	joiner *inflight.Joiner

	queue chan []byte   // records read, waiting for the worker
	free  chan []byte   // the worker's used buffers, for the reader to reuse
	stop  chan struct{} // closed by close: ends a read backoff
	wg    sync.WaitGroup
	once  sync.Once
	// wait pauses the reading goroutine for a backoff; it reports false
	// when the reader is closing. Tests replace it.
	wait func(time.Duration) bool

	read         atomic.Uint64 // records read from the ring buffer
	queueDropped atomic.Uint64 // records dropped because the queue was full
	// lean is set while the memory budget sheds stack detail
	// (SetStackDetail); keep is the overruns a snapshot keeps now.
	lean atomic.Bool
	keep atomic.Int64

	mu      sync.Mutex
	pending []snapshot.Overrun
	dropped uint64
	// earlyTaken is the joiner's EarlyDropped at the last
	// TakeEarlyDropped.
	earlyTaken uint64
}

// Open makes a reader of the overruns ring buffer m; Start runs it.
func Open(m *ebpf.Map, cfg Config) (*Reader, error) {
	rd, err := ringbuf.NewReader(m)
	if err != nil {
		return nil, fmt.Errorf("open overrun ring buffer: %w", err)
	}
	return NewQueue(rd, cfg), nil
}

// NewQueue makes a reader of rd with its queue; Start runs it.
func NewQueue(rd RecordReader, cfg Config) *Reader {
	n := cfg.Queue
	if n <= 0 {
		n = DefaultQueue
	}
	o := &Reader{
		rd: rd, cfg: cfg, log: cfg.Logger, joiner: inflight.NewJoiner(inflight.JoinConfig{}),
		queue: make(chan []byte, n),
		// The reader holds one buffer, the worker one, the queue n.
		free: make(chan []byte, n+2),
		stop: make(chan struct{}),
	}
	if o.log == nil {
		o.log = slog.New(slog.DiscardHandler)
	}
	o.wait = o.sleep
	o.keep.Store(int64(cfg.Keep))
	return o
}

// Start runs the reading goroutine and the worker until Close.
func (o *Reader) Start() {
	o.wg.Add(2)
	go func() { defer o.wg.Done(); o.readLoop() }()
	go func() { defer o.wg.Done(); o.work() }()
}

// readLoop copies records into the queue until the reader is closed, then
// closes the queue: the worker handles what is left in it and returns.
func (o *Reader) readLoop() {
	defer close(o.queue)
	var rec ringbuf.Record
	var backoff time.Duration
	var lastErr string
	for {
		if err := o.rd.ReadInto(&rec); err != nil {
			if errors.Is(err, ringbuf.ErrClosed) {
				return
			}
			backoff = min(max(2*backoff, readBackoffMin), readBackoffMax)
			if msg := err.Error(); msg != lastErr {
				// Logged once per distinct error, not once per retry.
				o.log.Warn("overrun_read_failed", "error", err, "retry_in", backoff)
				lastErr = msg
			}
			if !o.wait(backoff) {
				return
			}
			continue
		}
		if backoff != 0 {
			o.log.Info("overrun_read_recovered")
			backoff, lastErr = 0, ""
		}
		o.read.Add(1)
		var buf []byte
		select {
		case buf = <-o.free:
		default:
		}
		buf = append(buf[:0], rec.RawSample...)
		select {
		case o.queue <- buf:
		default:
			o.queueDropped.Add(1)
			o.recycle(buf)
		}
	}
}

// sleep waits d, or less when the reader is closed (then it reports false).
func (o *Reader) sleep(d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-o.stop:
		return false
	}
}

func (o *Reader) recycle(buf []byte) {
	select {
	case o.free <- buf:
	default:
	}
}

// work handles queued records until the queue is closed and empty.
func (o *Reader) work() {
	for buf := range o.queue {
		o.handle(buf)
		o.recycle(buf)
	}
}

// handle decodes one record, joins it with the in-span samples of its span
// and delivers what the joiner reports. A record that neither OnOverrun nor
// the snapshot's room would take is counted as dropped before its stacks
// are symbolized or its cgroup resolved.
func (o *Reader) handle(raw []byte) {
	r, err := overrunRecord(raw)
	if err != nil {
		o.log.Warn("overrun_decode_failed", "error", err)
		return
	}
	ov := o.decode(r)
	// An in-span sample's stack is the data the joiner keeps for its
	// span's end: named now, while the process is most likely alive.
	if ov.StillRunning {
		o.symbolize(&ov, r)
	}
	// In-span samples wait for their span's end; the first one of a
	// span is reported at once, as the span still running.
	out, ok := o.join(r, ov)
	if !ok {
		return
	}
	deliver := o.cfg.OnOverrun != nil
	keep := int(o.keep.Load())
	o.mu.Lock()
	room := len(o.pending) < keep
	if !room && !deliver {
		o.dropped++
	}
	o.mu.Unlock()
	if !room && !deliver {
		return
	}
	if !out.StillRunning {
		o.symbolize(&out, r)
	}
	if o.lean.Load() {
		leanStacks(&out)
	}
	// The process a series of a split cgroup is named after: the
	// key's tgid, or the pid of a span still running (it has no key
	// yet).
	tgid := r.Tgid
	if out.StillRunning {
		tgid = out.PID
	}
	o.resolveCgroup(&out, tgid)
	if deliver {
		o.cfg.OnOverrun(out)
	}
	o.mu.Lock()
	if len(o.pending) < keep {
		o.pending = append(o.pending, out)
	} else {
		o.dropped++
	}
	o.mu.Unlock()
}

// SetStackDetail sheds stack detail (full false) or restores it: while
// shed, an overrun keeps its innermost StackFramesShed user frames and no
// kernel stack or in-span samples, and Take keeps a tenth of Config.Keep
// (the rest are counted as dropped, and still delivered to OnOverrun).
func (o *Reader) SetStackDetail(full bool) {
	o.lean.Store(!full)
	keep := o.cfg.Keep
	if !full {
		keep = max(keep/10, min(keep, 10))
	}
	o.keep.Store(int64(keep))
}

// Read returns how many records were read from the ring buffer.
func (o *Reader) Read() uint64 { return o.read.Load() }

// StackFramesShed is how many user stack frames an overrun keeps while
// the memory budget sheds stack detail.
const StackFramesShed = 32

// leanStacks cuts an overrun to what the memory budget keeps while it
// sheds stack detail: the innermost StackFramesShed user frames, no
// kernel stack, no in-span samples. The record, its span, duration and
// budget stay, and the span is counted over its budget in its series.
func leanStacks(ov *snapshot.Overrun) {
	cut := len(ov.UserStack) > StackFramesShed || len(ov.KernelStack) > 0 || len(ov.Samples) > 0
	if len(ov.UserStack) > StackFramesShed {
		ov.UserStack = ov.UserStack[:StackFramesShed:StackFramesShed]
	}
	ov.KernelStack, ov.Samples = nil, nil
	if cut {
		ov.StackError = joinErr(ov.StackError, fmt.Sprintf("stack detail shed under memory pressure: the innermost %d user frames kept, kernel stack and in-span samples left out", StackFramesShed))
	}
}

// Take returns the overruns kept since the last call and the counts of
// those dropped for lack of room in the snapshot and in the queue.
func (o *Reader) Take() (ovs []snapshot.Overrun, dropped, queueDropped uint64) {
	queueDropped = o.queueDropped.Swap(0)
	o.mu.Lock()
	defer o.mu.Unlock()
	p, d := o.pending, o.dropped
	o.pending, o.dropped = nil, 0
	return p, d, queueDropped
}

// TakeEarlyDropped returns the number of in-span samples of spans sampled
// from their start that ended within their budgets (the joiner's
// inflight.Joiner.EarlyDropped) since the last call.
func (o *Reader) TakeEarlyDropped() uint64 {
	n := o.joiner.EarlyDropped()
	o.mu.Lock()
	defer o.mu.Unlock()
	d := n - o.earlyTaken
	o.earlyTaken = n
	return d
}

// Close closes the ring buffer reader and waits for the reading goroutine
// and for the worker, which first handles the records still queued (at
// most the queue's size). It is safe to call more than once.
func (o *Reader) Close() {
	o.once.Do(func() {
		close(o.stop)
		o.rd.Close()
	})
	o.wg.Wait()
}

// overrunRecord checks a record's size and casts it.
func overrunRecord(raw []byte) (*bpf.SpanwatchOverrun, error) {
	var r bpf.SpanwatchOverrun
	if len(raw) < int(unsafe.Sizeof(r)) {
		return nil, fmt.Errorf("record of %d bytes, want %d", len(raw), unsafe.Sizeof(r))
	}
	return (*bpf.SpanwatchOverrun)(unsafe.Pointer(&raw[0])), nil
}

// decode reads a record's fields: everything but its stacks and its
// cgroup's names, which cost more (symbolize, resolveCgroup).
func (o *Reader) decode(r *bpf.SpanwatchOverrun) snapshot.Overrun {
	spanErr, stillRunning := inflight.DecodeStatus(r.Status)
	ov := snapshot.Overrun{
		Time:         monoToWall(r.TsNs),
		Span:         snapshot.NameString(bpf.Bytes(r.Name[:])),
		NameID:       r.NameId,
		PID:          r.Pid,
		TID:          r.Tid,
		Comm:         snapshot.NameString(bpf.Bytes(r.Comm[:])),
		CgroupID:     r.CgroupId,
		DurationNs:   r.DurationNs,
		BudgetNs:     r.BudgetNs,
		Error:        spanErr,
		StillRunning: stillRunning,
		Source:       sourceNames[r.Source],
	}
	if o.cfg.Names != nil {
		ov.Span, _ = o.cfg.Names.ResolveName(ov.Span)
	}
	if r.Labelset != 0 && o.cfg.Names != nil {
		ov.SourceLabels = o.cfg.Names.Labels(r.Labelset, r.Labels[:], r.Other)
	}
	if r.TraceId != [16]byte{} {
		ov.TraceID = hex.EncodeToString(r.TraceId[:])
	}
	if r.SpanId != [8]byte{} {
		ov.SpanID = hex.EncodeToString(r.SpanId[:])
	}
	return ov
}

// resolveCgroup names the overrun's cgroup, container, pod, unit and
// process, as its series'.
func (o *Reader) resolveCgroup(ov *snapshot.Overrun, tgid uint32) {
	if o.cfg.Identify != nil && ov.CgroupID != 0 {
		ov.Identity = o.cfg.Identify(ov.CgroupID, tgid)
	}
}

// symbolize names the record's user and kernel stacks.
func (o *Reader) symbolize(ov *snapshot.Overrun, r *bpf.SpanwatchOverrun) {
	ustack := stackAddrs(r.Ustack[:], r.UstackLen)
	kstack := stackAddrs(r.Kstack[:], r.KstackLen)
	s := o.cfg.Symbolizer
	if err := s.Capture(ov.PID); err != nil {
		o.log.Debug("capture_maps_failed", "pid", ov.PID, "error", err)
	}
	var err error
	ov.UserStack, err = s.User(ov.PID, ustack)
	switch {
	case err != nil:
		ov.StackError = err.Error()
	case r.UstackLen < 0:
		ov.StackError = fmt.Sprintf("user stack: bpf_get_stack: %s", unix.Errno(-r.UstackLen))
	default:
		ov.StackError = symbolize.Hint(ov.UserStack)
	}
	ov.StackError = joinErr(ov.StackError, explain(s, ov.UserStack))
	if len(kstack) > 0 {
		if ov.KernelStack, err = s.Kernel(kstack); err != nil && ov.StackError == "" {
			ov.StackError = err.Error()
		}
	}
}

func stackAddrs(stack []uint64, n int32) []uint64 {
	if n <= 0 {
		return nil
	}
	k := int(n) / 8
	if k > len(stack) {
		k = len(stack)
	}
	out := make([]uint64, 0, k)
	for _, a := range stack[:k] {
		if a == 0 {
			break
		}
		out = append(out, a)
	}
	return out
}

// monoToWall converts a CLOCK_MONOTONIC reading (bpf_ktime_get_ns) to wall
// time.
func monoToWall(ns uint64) time.Time {
	var ts unix.Timespec
	now := time.Now()
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
		return now
	}
	return now.Add(-time.Duration(uint64(ts.Nano()) - ns))
}

// An explainer says why frames have no names (a stripped binary without
// its debug file) and what to install; *symbolize.Symbolizer is one.
type explainer interface {
	Explain([]snapshot.Frame) string
}

// explain returns what would name a stack's unnamed frames, or "".
func explain(s Symbolizer, frames []snapshot.Frame) string {
	if e, ok := s.(explainer); ok {
		return e.Explain(frames)
	}
	return ""
}

func joinErr(a, b string) string {
	switch {
	case a == "":
		return b
	case b == "":
		return a
	}
	return a + "; " + b
}

// join hands a decoded record to the joiner, which reports a span's first
// in-span sample at once and keeps the others for the span's end.
func (o *Reader) join(r *bpf.SpanwatchOverrun, ov snapshot.Overrun) (snapshot.Overrun, bool) {
	return o.joiner.Add(inflight.Record{
		Overrun: ov, Sample: ov.StillRunning, OffCPU: inflight.OffCPU(r.Status),
		StartNs: r.StartNs, MonoStartNs: r.TsNs - r.DurationNs,
	})
}
