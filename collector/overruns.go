//go:build linux

package collector

import (
	"encoding/hex"
	"errors"
	"fmt"
	"sync"
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
}

// overrunReader reads overrun records from the ring buffer as they arrive.
type overrunReader struct {
	rd     *ringbuf.Reader
	cfg    Config
	marker *markerSource // set when the marker source is on
	series *seriesReader // for label names
	joiner *inflight.Joiner

	mu      sync.Mutex
	pending []snapshot.Overrun
	dropped uint64
}

func newOverrunReader(m *ebpf.Map, cfg Config, r *seriesReader) (*overrunReader, error) {
	rd, err := ringbuf.NewReader(m)
	if err != nil {
		return nil, fmt.Errorf("open overrun ring buffer: %w", err)
	}
	return &overrunReader{rd: rd, cfg: cfg, series: r, joiner: inflight.NewJoiner(inflight.JoinConfig{})}, nil
}

func (o *overrunReader) run() {
	var rec ringbuf.Record
	for {
		if err := o.rd.ReadInto(&rec); err != nil {
			if errors.Is(err, ringbuf.ErrClosed) {
				return
			}
			o.cfg.Logger.Warn("overrun_read_failed", "error", err)
			continue
		}
		ov, err := o.decode(rec.RawSample)
		if err != nil {
			o.cfg.Logger.Warn("overrun_decode_failed", "error", err)
			continue
		}
		// In-span samples wait for their span's end; the first one of a
		// span is reported at once, as the span still running.
		var ok bool
		if ov, ok = o.join(rec.RawSample, ov); !ok {
			continue
		}
		if o.cfg.OnOverrun != nil {
			o.cfg.OnOverrun(ov)
		}
		o.mu.Lock()
		if len(o.pending) < o.cfg.MaxOverrunsPerSnapshot {
			o.pending = append(o.pending, ov)
		} else {
			o.dropped++
		}
		o.mu.Unlock()
	}
}

func (o *overrunReader) take() ([]snapshot.Overrun, uint64) {
	o.mu.Lock()
	defer o.mu.Unlock()
	p, d := o.pending, o.dropped
	o.pending, o.dropped = nil, 0
	return p, d
}

func (o *overrunReader) close() { o.rd.Close() }

func (o *overrunReader) decode(raw []byte) (snapshot.Overrun, error) {
	var r bpf.SpanwatchOverrun
	if len(raw) < int(unsafe.Sizeof(r)) {
		return snapshot.Overrun{}, fmt.Errorf("record of %d bytes, want %d", len(raw), unsafe.Sizeof(r))
	}
	r = *(*bpf.SpanwatchOverrun)(unsafe.Pointer(&raw[0]))
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
	if c := o.cfg.Resolver; c != nil && ov.CgroupID != 0 {
		info := c.Resolve(ov.CgroupID)
		ov.Cgroup, ov.ContainerID, ov.PodUID, ov.Unit = info.Path, info.ContainerID, info.PodUID, info.Unit
		ov.Namespace, ov.Pod, ov.Container = info.Namespace, info.Pod, info.Container
	}
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
	return ov, nil
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
