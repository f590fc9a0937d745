//go:build linux

package tracepoint

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/hex"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
	"unsafe"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"

	"github.com/spanwatch/spanwatch/bpf"
	"github.com/spanwatch/spanwatch/collector"
	"github.com/spanwatch/spanwatch/internal/bpftest"
	"github.com/spanwatch/spanwatch/internal/eventheader"
	"github.com/spanwatch/spanwatch/internal/eventheader/ehtest"
	"github.com/spanwatch/spanwatch/internal/kernel"
	"github.com/spanwatch/spanwatch/snapshot"
)

// newTestCollector starts a collector without the user_events source
// (this host's kernel may not have it), with a small series array.
func newTestCollector(t testing.TB, cfg collector.Config) *collector.Collector {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root to load BPF")
	}
	cfg.Sources = collector.Sources{Marker: true}
	cfg.ScanInterval = -1
	if cfg.MaxSeries == 0 {
		cfg.MaxSeries = 1024
	}
	c, err := collector.New(context.Background(), cfg)
	if err != nil {
		t.Fatalf("start collector: %v", err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// ehHarness runs the EventHeader decoder on payloads with
// BPF_PROG_TEST_RUN, as if perf_tp_event() had been called with them.
type ehHarness struct {
	t    testing.TB
	c    *collector.Collector
	o    *ehObjects
	prev map[uint32]uint64
	cut  uint64 // names cut, in the last series() window
}

const ehTestType = 777 // a tracepoint id no real event has here

// maxName is the longest span name: SPAN_NAME_LEN - 1.
const maxName = 127

func newEHHarness(t testing.TB, cfg collector.Config) *ehHarness {
	bpftest.Require(t, kernel.Loop, kernel.Atomics)
	c := newTestCollector(t, cfg)
	o, err := loadEventHeader(c.Maps(), "test", 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(o.close)
	m := bpf.EventheaderEhMapping{Event: eventheader.NameHash(eventheader.SpanEvent), Kind: 1}
	wants := eventheader.SpanWants()
	m.Nwant = uint32(len(wants))
	copy(m.Want[:], wants)
	if err := o.mappings.Put(uint32(0), &m); err != nil {
		t.Fatal(err)
	}
	if err := o.tracepoints.Put(uint32(ehTestType), &bpf.EventheaderEhTracepoint{N: 1}); err != nil {
		t.Fatal(err)
	}
	h := &ehHarness{t: t, c: c, o: o}
	h.prev = h.counters()
	return h
}

// counters sums the per-CPU decoder counters.
func (h *ehHarness) counters() map[uint32]uint64 {
	out := map[uint32]uint64{}
	var vals []uint64
	for i := uint32(0); i < h.o.counters.MaxEntries(); i++ {
		if err := h.o.counters.Lookup(i, &vals); err != nil {
			h.t.Fatal(err)
		}
		for _, v := range vals {
			out[i] += v
		}
	}
	return out
}

// run decodes one payload in BPF and returns the counters that moved.
func (h *ehHarness) run(payload []byte) map[uint32]uint64 {
	h.t.Helper()
	var in bpf.EventheaderEhTestIn
	in.Type = ehTestType
	n := copy(in.Record[8:], payload)
	in.EntrySize = uint32(8 + n)
	if err := h.o.testInput.Put(uint32(0), &in); err != nil {
		h.t.Fatal(err)
	}
	if _, err := h.o.prog.Run(&ebpf.RunOptions{Context: make([]byte, 8)}); err != nil {
		h.t.Fatal(err)
	}
	cur := h.counters()
	delta := map[uint32]uint64{}
	for k, v := range cur {
		if v != h.prev[k] {
			delta[k] = v - h.prev[k]
		}
	}
	h.prev = cur
	return delta
}

// reason returns the one reason a run counted.
func (h *ehHarness) reason(delta map[uint32]uint64) eventheader.Reason {
	h.t.Helper()
	var rs []eventheader.Reason
	for k, v := range delta {
		if k < uint32(eventheader.NumReasons) {
			for range v {
				rs = append(rs, eventheader.Reason(k))
			}
		}
	}
	if len(rs) != 1 {
		h.t.Fatalf("counters moved %v, want one reason", delta)
	}
	return rs[0]
}

// series returns the series with spans since the last call; cut the
// names the core cut in that time.
func (h *ehHarness) series() []snapshot.Series {
	h.t.Helper()
	s, err := h.c.Snapshot()
	if err != nil {
		h.t.Fatal(err)
	}
	h.cut = s.Stats.NamesTruncated
	var out []snapshot.Series
	for _, sr := range s.Series {
		if sr.Count > 0 {
			out = append(out, sr)
		}
	}
	return out
}

// TestEventHeaderReasonsMatchGo: the BPF enum and the Go one agree.
func TestEventHeaderReasonsMatchGo(t *testing.T) {
	if int(bpf.EventheaderEhReasonEH_NUM_REASONS) != int(eventheader.NumReasons) ||
		int(bpf.EventheaderEhReasonEH_UNPAIRED) != int(eventheader.ReasonUnpaired) ||
		int(bpf.EventheaderEhReasonEH_BAD_TIME) != int(eventheader.ReasonBadTime) {
		t.Fatal("enum eh_reason in bpf/eventheader.h and internal/eventheader.Reason differ")
	}
}

// TestEventHeaderGoldensBPF decodes the hand-derived golden spans in BPF:
// each is aggregated under its name with its duration and status, and its
// overrun record carries its trace and span ids.
func TestEventHeaderGoldensBPF(t *testing.T) {
	// OnOverrun runs on the collector's reader goroutine.
	var (
		mu  sync.Mutex
		ovs []snapshot.Overrun
	)
	got := func() []snapshot.Overrun {
		mu.Lock()
		defer mu.Unlock()
		return append([]snapshot.Overrun(nil), ovs...)
	}
	h := newEHHarness(t, collector.Config{OnOverrun: func(o snapshot.Overrun) {
		mu.Lock()
		ovs = append(ovs, o)
		mu.Unlock()
	}})
	for _, tc := range ehtest.GoldenCases {
		t.Run(tc.File, func(t *testing.T) {
			p, err := ehtest.Golden(tc.File)
			if err != nil {
				t.Fatal(err)
			}
			want, r := eventheader.DecodeSpan(p, maxName)
			if r != eventheader.OK {
				t.Fatalf("the Go decoder refuses it: %s", r)
			}
			if err := h.c.SetBudgets([]collector.BudgetRule{{Span: want.Name, Budget: 1}}); err != nil {
				t.Fatal(err)
			}
			mu.Lock()
			ovs = nil
			mu.Unlock()
			delta := h.run(p)
			if r := h.reason(delta); r != eventheader.OK {
				t.Fatalf("BPF reason %s", r)
			}
			srs := h.series()
			if want.NameTruncated != (h.cut == 1) {
				t.Errorf("name truncated %t, the core counted %d", want.NameTruncated, h.cut)
			}
			wantErr := uint64(0)
			if !want.Success {
				wantErr = 1
			}
			if len(srs) != 1 || srs[0].Span != want.Name || srs[0].Count != 1 || srs[0].SumNs != want.DurationNs || srs[0].Errors != wantErr {
				t.Fatalf("series %+v, want %q count 1 sum %d errors %d", srs, want.Name, want.DurationNs, wantErr)
			}
			ovs := got()
			for deadline := time.Now().Add(2 * time.Second); len(ovs) == 0 && time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
				ovs = got()
			}
			if len(ovs) != 1 {
				t.Fatalf("%d overruns, want 1", len(ovs))
			}
			o := ovs[0]
			if o.TraceID != hex.EncodeToString(want.TraceID[:]) || o.SpanID != hex.EncodeToString(want.SpanID[:]) ||
				o.DurationNs != want.DurationNs || o.Span != want.Name || o.Source != "eventheader" {
				t.Errorf("overrun %+v", o)
			}
		})
	}
}

// goName is the span name the core keeps for name: up to its first NUL.
func goName(name string) string {
	if i := strings.IndexByte(name, 0); i >= 0 {
		return name[:i]
	}
	return name
}

// TestEventHeaderDifferential holds the BPF decoder against the Go
// reference decoder on the goldens and thousands of broken variants of
// them: the same reason for every event, and for the good ones the same
// name, duration and status in the aggregates.
func TestEventHeaderDifferential(t *testing.T) {
	h := newEHHarness(t, collector.Config{MaxSeries: 16384})
	var inputs [][]byte
	for _, tc := range ehtest.GoldenCases {
		p, err := ehtest.Golden(tc.File)
		if err != nil {
			t.Fatal(err)
		}
		inputs = append(inputs, p)
	}
	for _, p := range [][]byte{zstringSpan(), arraySpan()} {
		if _, r := eventheader.DecodeSpan(p, maxName); r != eventheader.OK {
			t.Fatalf("a base input does not decode: %s", r)
		}
		inputs = append(inputs, p)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	n := 2000
	if testing.Short() {
		n = 200
	}
	byReason := map[eventheader.Reason]int{}
	for i := 0; i < n; i++ {
		p := mutateEvent(rng, inputs[i%len(inputs)])
		want, wr := eventheader.DecodeSpan(p, maxName)
		got := h.reason(h.run(p))
		byReason[wr]++
		if got != wr {
			t.Fatalf("case %d: BPF %s, Go %s; payload %x", i, got, wr, p)
		}
		if wr != eventheader.OK {
			continue
		}
		srs := h.series()
		wantErr := uint64(0)
		if !want.Success {
			wantErr = 1
		}
		// Compared by name id: the core's span_name_id gives two names
		// that differ only in bit 7 of the 8th byte of two of their
		// 8-byte words the same id (a multiply never carries down into
		// bit 63), so a snapshot can show the first such name seen.
		if len(srs) != 1 || srs[0].NameID != snapshot.NameID(goName(want.Name)) || srs[0].SumNs != want.DurationNs || srs[0].Errors != wantErr {
			t.Fatalf("case %d: series %+v, want %q sum %d errors %d; payload %x", i, srs, goName(want.Name), want.DurationNs, wantErr, p)
		}
	}
	t.Logf("%d events by reason: %v", n, byReason)
	if byReason[eventheader.OK] < n/20 || len(byReason) < 8 {
		t.Errorf("the mutations reach too few outcomes: %v", byReason)
	}
}

// zstringSpan is a Span event whose name is a NUL-terminated string and
// whose PartA starts with NUL-terminated UTF-16 and UTF-32 notes: the
// walker sizes them by scanning for their terminators.
func zstringSpan() []byte {
	b := ehtest.NewBuilder("Span")
	b.Struct("PartA", 5)
	b.Meta("note16", eventheader.EncZStringChar16, 0).Data('h', 0, 'i', 0, 0, 0)
	b.Meta("note32", eventheader.EncZStringChar32, 0).Data('o', 0, 0, 0, 'k', 0, 0, 0, 0, 0, 0, 0)
	b.Str("time", "2026-05-06T07:08:09.5+02:00").Str("ext_dt_traceId", strings.Repeat("ab", 16)).Str("ext_dt_spanId", strings.Repeat("cd", 8))
	b.Struct("PartB", 3)
	b.Meta("name", eventheader.EncZStringChar8, 0).Data([]byte("zero/terminated\x00")...)
	b.Str("startTime", "2026-05-06T05:08:09.25Z").Bool("success", false)
	return b.Payload()
}

// arraySpan is a Span event with arrays before the fields that matter: a
// constant array of u32, a variable array of counted strings, and a
// variable array of u16.
func arraySpan() []byte {
	b := ehtest.NewBuilder("Span")
	b.Meta("fixed", eventheader.EncValue32|eventheader.EncCArrayFlag, 0).MetaRaw(3, 0) // 3 elements
	b.Data(1, 0, 0, 0, 2, 0, 0, 0, 3, 0, 0, 0)
	b.Meta("words", eventheader.EncStringLength16Char8|eventheader.EncVArrayFlag, 0).Data(2, 0, 1, 0, 'a', 2, 0, 'b', 'c')
	b.Meta("shorts", eventheader.EncValue16|eventheader.EncVArrayFlag, 0).Data(2, 0, 9, 0, 8, 0)
	a := b.Struct("PartA", 3)
	b.Str("time", "2026-01-01T00:00:02Z").Str("ext_dt_traceId", strings.Repeat("0", 32)).Str("ext_dt_spanId", strings.Repeat("1", 16))
	b.SetCount(a, 3)
	b.Struct("PartB", 3)
	b.Str("name", "arrays").Str("startTime", "2026-01-01T00:00:01Z").Bool("success", true)
	return b.Payload()
}

// mutateEvent breaks a copy of p in one of the ways a buggy writer could.
func mutateEvent(rng *rand.Rand, p []byte) []byte {
	q := append([]byte(nil), p...)
	metaEnd := 12 + int(binary.LittleEndian.Uint16(q[8:]))
	switch rng.IntN(9) {
	case 0: // keep it whole: a good event
	case 1: // cut it short
		q = q[:rng.IntN(len(q))]
	case 2: // a random byte in the metadata
		q[12+rng.IntN(metaEnd-12)] = byte(rng.IntN(256))
	case 3: // a random byte in the data
		if metaEnd < len(q) {
			q[metaEnd+rng.IntN(len(q)-metaEnd)] = byte(rng.IntN(256))
		}
	case 4: // a struct's member count
		i := bytes.Index(q[12:metaEnd], []byte{0x81}) // the first struct
		if i >= 0 {
			q[12+i+1] = byte(rng.IntN(12))
		}
	case 5: // the metadata's size
		binary.LittleEndian.PutUint16(q[8:], uint16(rng.IntN(len(q)+8)))
	case 6: // a digit of a time or an id
		for tries := 0; tries < 20; tries++ {
			i := metaEnd + rng.IntN(max(1, len(q)-metaEnd))
			if i < len(q) && (q[i] >= '0' && q[i] <= '9' || q[i] >= 'a' && q[i] <= 'f') {
				q[i] = "0123456789abcdefgT:.Z+-x "[rng.IntN(25)]
				break
			}
		}
	case 7: // the header's flags
		q[0] = byte(rng.IntN(8))
	case 8: // several bytes anywhere
		for k := 0; k < 1+rng.IntN(4); k++ {
			q[rng.IntN(len(q))] = byte(rng.IntN(256))
		}
	}
	return q
}

// TestEventHeaderLimitsBPF: events past the decoder's limits are counted
// too_large, in BPF as in Go.
func TestEventHeaderLimitsBPF(t *testing.T) {
	h := newEHHarness(t, collector.Config{})
	x := ehtest.Exporter{Version: ehtest.RustMain}
	long := ehtest.Span{Name: strings.Repeat("n", eventheader.BufSize), Start: time.Unix(1, 0), End: time.Unix(2, 0)}
	p, err := x.Encode(&long)
	if err != nil {
		t.Fatal(err)
	}
	if _, wr := eventheader.DecodeSpan(p, maxName); wr != eventheader.ReasonTooLarge {
		t.Fatalf("Go: %s", wr)
	}
	if r := h.reason(h.run(p)); r != eventheader.ReasonTooLarge {
		t.Fatalf("BPF: %s, want too_large", r)
	}
	// A long name that fits the buffer is cut on a character boundary.
	long.Name = strings.Repeat("é", 100)
	p, _ = x.Encode(&long)
	delta := h.run(p)
	if r := h.reason(delta); r != eventheader.OK {
		t.Fatalf("BPF: %v", delta)
	}
	srs := h.series()
	if len(srs) != 1 || srs[0].Span != strings.Repeat("é", 63) || h.cut != 1 {
		t.Fatalf("series %+v (%d names cut), want 63 é, cut once", srs, h.cut)
	}
}

// BenchmarkEventHeaderDecoder measures the EventHeader decoder's own cost
// per event with the kernel's BPF stats (run_time_ns / run_cnt) against
// the fixed-struct user_events path (eh_test_fixed: what spanwatch.bpf.c
// does with a spanwatch_span record), both run by BPF_PROG_TEST_RUN in the
// same harness, in alternating rounds; the figures are the medians of the
// rounds. basic is basic_main.golden (the 12th field, PartB.success, is
// the last one needed); full is full_main.golden (cloud role fields first:
// the needed fields end at the 14th).
func BenchmarkEventHeaderDecoder(b *testing.B) {
	if os.Geteuid() != 0 {
		b.Skip("needs root")
	}
	// BPF_ENABLE_STATS, not the sysctl: statistics stay on while the fd is
	// open, and the kernel turns them off when it closes, however the
	// benchmark ends (a sysctl written back in a defer is left on by a
	// crash, or by two runs that overlap).
	stats, err := ebpf.EnableStats(uint32(unix.BPF_STATS_RUN_TIME))
	if err != nil {
		b.Skipf("BPF statistics: %v (kernel 5.8+)", err)
	}
	defer stats.Close()
	h := newEHHarness(b, collector.Config{})
	put := func(p []byte) {
		var in bpf.EventheaderEhTestIn
		in.Type = ehTestType
		n := copy(in.Record[8:], p)
		in.EntrySize = uint32(8 + n)
		if err := h.o.testInput.Put(uint32(0), &in); err != nil {
			b.Fatal(err)
		}
	}
	run := func(prog *ebpf.Program, p []byte) float64 {
		put(p)
		s0, err := prog.Stats()
		if err != nil {
			b.Fatal(err)
		}
		opts := &ebpf.RunOptions{Context: make([]byte, 8)} // raw_tp test runs take no Repeat
		for range b.N {
			if _, err := prog.Run(opts); err != nil {
				b.Fatal(err)
			}
		}
		s1, _ := prog.Stats()
		if s1.RunCount-s0.RunCount < uint64(b.N) {
			b.Fatalf("%d runs for %d", s1.RunCount-s0.RunCount, b.N)
		}
		return float64(s1.Runtime-s0.Runtime) / float64(s1.RunCount-s0.RunCount)
	}
	var fixedEv bpf.SpanwatchSpanEvent
	fixedEv.DurationNs = 1000
	copy(fixedEv.Name[:], []int8{'b', 'e', 'n', 'c', 'h'})
	fixed := unsafe.Slice((*byte)(unsafe.Pointer(&fixedEv)), unsafe.Sizeof(fixedEv))
	basic, _ := ehtest.Golden("basic_main.golden")
	full, _ := ehtest.Golden("full_main.golden")
	var f, bs, fl []float64
	b.ResetTimer()
	for range 5 {
		f = append(f, run(h.o.testFixed, fixed))
		bs = append(bs, run(h.o.prog, basic))
		fl = append(fl, run(h.o.prog, full))
	}
	b.StopTimer()
	med := func(x []float64) float64 { slices.Sort(x); return x[len(x)/2] }
	mf, mb, ml := med(f), med(bs), med(fl)
	b.ReportMetric(mf, "fixed-ns/run")
	b.ReportMetric(mb, "eh-basic-ns/run")
	b.ReportMetric(ml, "eh-full-ns/run")
	b.ReportMetric(mb/mf, "basic/fixed")
	b.ReportMetric(ml/mf, "full/fixed")
}
