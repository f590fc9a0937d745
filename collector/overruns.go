//go:build linux

package collector

import (
	"encoding/hex"
	"errors"
	"fmt"
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

// Read errors other than a closed reader are retried after a pause that
// doubles from readBackoffMin up to readBackoffMax, so a reader that keeps
// failing does not spin on a CPU.
const (
	readBackoffMin = 10 * time.Millisecond
	readBackoffMax = time.Second
)

// recordReader is what the overrun reader reads: a *ringbuf.Reader.
type recordReader interface {
	ReadInto(*ringbuf.Record) error
	Close() error
}

// overrunReader reads overrun records from the ring buffer as they arrive.
// Its reading goroutine only copies each record into a bounded queue and
// reads on, so that nothing behind it (symbolizing, cgroup names, an
// OnOverrun that writes to disk) can back up into the ring buffer, where a
// full buffer loses records in the kernel. One worker decodes, joins,
// symbolizes and delivers what is queued; what finds the queue full is
// dropped there and counted (Stats.OverrunsQueueDropped).
type overrunReader struct {
	rd     recordReader
	cfg    Config
	series *seriesReader // for label names
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
}

func newOverrunReader(m *ebpf.Map, cfg Config, r *seriesReader) (*overrunReader, error) {
	rd, err := ringbuf.NewReader(m)
	if err != nil {
		return nil, fmt.Errorf("open overrun ring buffer: %w", err)
	}
	return newOverrunQueue(rd, cfg, r), nil
}

// newOverrunQueue makes a reader of rd with its queue; start runs it.
func newOverrunQueue(rd recordReader, cfg Config, r *seriesReader) *overrunReader {
	n := cfg.OverrunQueue
	if n <= 0 {
		n = DefaultOverrunQueue
	}
	o := &overrunReader{
		rd: rd, cfg: cfg, series: r, joiner: inflight.NewJoiner(inflight.JoinConfig{}),
		queue: make(chan []byte, n),
		// The reader holds one buffer, the worker one, the queue n.
		free: make(chan []byte, n+2),
		stop: make(chan struct{}),
	}
	o.wait = o.sleep
	o.keep.Store(int64(cfg.MaxOverrunsPerSnapshot))
	return o
}

// start runs the reading goroutine and the worker until close.
func (o *overrunReader) start() {
	o.wg.Add(2)
	go func() { defer o.wg.Done(); o.readLoop() }()
	go func() { defer o.wg.Done(); o.work() }()
}

// readLoop copies records into the queue until the reader is closed, then
// closes the queue: the worker handles what is left in it and returns.
func (o *overrunReader) readLoop() {
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
				o.cfg.Logger.Warn("overrun_read_failed", "error", err, "retry_in", backoff)
				lastErr = msg
			}
			if !o.wait(backoff) {
				return
			}
			continue
		}
		if backoff != 0 {
			o.cfg.Logger.Info("overrun_read_recovered")
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
func (o *overrunReader) sleep(d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-o.stop:
		return false
	}
}

func (o *overrunReader) recycle(buf []byte) {
	select {
	case o.free <- buf:
	default:
	}
}

// work handles queued records until the queue is closed and empty.
func (o *overrunReader) work() {
	for buf := range o.queue {
		o.handle(buf)
		o.recycle(buf)
	}
}

// handle decodes one record, joins it with the in-span samples of its span
// and delivers what the joiner reports. A record that neither OnOverrun nor
// the snapshot's room would take is counted as dropped before its stacks
// are symbolized or its cgroup resolved.
func (o *overrunReader) handle(raw []byte) {
	r, err := overrunRecord(raw)
	if err != nil {
		o.cfg.Logger.Warn("overrun_decode_failed", "error", err)
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
	o.resolveCgroup(&out)
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

// take returns the overruns kept since the last call and the counts of
// those dropped for lack of room in the snapshot and in the queue.
func (o *overrunReader) take() (ovs []snapshot.Overrun, dropped, queueDropped uint64) {
	queueDropped = o.queueDropped.Swap(0)
	o.mu.Lock()
	defer o.mu.Unlock()
	p, d := o.pending, o.dropped
	o.pending, o.dropped = nil, 0
	return p, d, queueDropped
}

// close closes the ring buffer reader and waits for the reading goroutine
// and for the worker, which first handles the records still queued (at
// most the queue's size). It is safe to call more than once.
func (o *overrunReader) close() {
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
func (o *overrunReader) decode(r *bpf.SpanwatchOverrun) snapshot.Overrun {
	spanErr, stillRunning := inflight.DecodeStatus(r.Status)
	ov := snapshot.Overrun{
		Time:         monoToWall(r.TsNs),
		Span:         snapshot.NameString(int8Bytes(r.Name[:])),
		NameID:       r.NameId,
		PID:          r.Pid,
		TID:          r.Tid,
		Comm:         snapshot.NameString(int8Bytes(r.Comm[:])),
		CgroupID:     r.CgroupId,
		DurationNs:   r.DurationNs,
		BudgetNs:     r.BudgetNs,
		Error:        spanErr,
		StillRunning: stillRunning,
		Source:       sourceNames[r.Source],
	}
	if o.series != nil {
		ov.Span, _ = o.series.resolveName(ov.Span)
	}
	if r.Labelset != 0 && o.series != nil {
		ov.SourceLabels = o.series.labels(r.Labelset, r.Labels[:], r.Other)
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
func (o *overrunReader) resolveCgroup(ov *snapshot.Overrun) {
	if c := o.cfg.Resolver; c != nil && ov.CgroupID != 0 {
		ov.Identity = identity(c.Resolve(ov.CgroupID))
	}
}

// symbolize names the record's user and kernel stacks.
func (o *overrunReader) symbolize(ov *snapshot.Overrun, r *bpf.SpanwatchOverrun) {
	ustack := stackAddrs(r.Ustack[:], r.UstackLen)
	kstack := stackAddrs(r.Kstack[:], r.KstackLen)
	s := o.cfg.Symbolizer
	if err := s.Capture(ov.PID); err != nil {
		o.cfg.Logger.Debug("capture_maps_failed", "pid", ov.PID, "error", err)
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

func int8Bytes(b []int8) []byte {
	return unsafe.Slice((*byte)(unsafe.Pointer(&b[0])), len(b))
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
