//go:build linux

package tracepoint

import (
	"encoding/binary"
	"log/slog"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/cilium/ebpf"

	"github.com/spanwatch/spanwatch/bpf"
	"github.com/spanwatch/spanwatch/internal/eventheader"
	"github.com/spanwatch/spanwatch/internal/eventheader/ehtest"
	"github.com/spanwatch/spanwatch/internal/tpsource"
)

var ehHeaderFields = []string{"u8 eventheader_flags", "u8 version", "u16 id", "u16 tag", "u8 opcode", "u8 level"}

// writeEH runs the EventHeader program on payload p as tracepoint id.
func (h *ueHarness) writeEH(id uint32, p []byte) map[string]uint64 {
	h.t.Helper()
	var in bpf.EventheaderEhTestIn
	in.Type = id
	n := copy(in.Record[8:], p)
	binary.LittleEndian.PutUint16(in.Record[0:], uint16(id))
	in.EntrySize = uint32(8 + n)
	if err := h.tp.eh.testInput.Put(uint32(0), &in); err != nil {
		h.t.Fatal(err)
	}
	if _, err := h.tp.eh.prog.Run(&ebpf.RunOptions{Context: make([]byte, 8)}); err != nil {
		h.t.Fatal(err)
	}
	cur, err := h.tp.Counts()
	if err != nil {
		h.t.Fatal(err)
	}
	d := map[string]uint64{}
	for k, v := range cur {
		if v != h.prev[k] {
			d[k] = v - h.prev[k]
		}
	}
	h.prev = cur
	return d
}

// TestEventHeaderSources: a provider's Span events and an application's
// own EventHeader events, mapped by field name, single and paired; the
// provider selection by level and keyword; a tracepoint whose format is
// not EventHeader's.
func TestEventHeaderSources(t *testing.T) {
	h := newUEHarness(t, []tpsource.Source{
		{Kind: tpsource.EventHeader, Provider: "otel"},
		{Kind: tpsource.EventHeader, Provider: "myapp", Level: 4, Event: "Request", NameField: tpsource.Field{"PartB", "route"},
			DurationField: tpsource.Field{"PartC", "dur.ns"}, StatusField: tpsource.Field{"PartB", "failed"}},
		{Kind: tpsource.EventHeader, Provider: "myapp", Keyword: 0x2, Start: "Begin", End: "Done", Span: "job", KeyField: tpsource.Field{"id"}},
	})
	h.bind("otel_L4K1", 931, ehHeaderFields...)
	h.bind("myapp_L4K1", 932, ehHeaderFields...)
	h.bind("myapp_L5K1", 933, ehHeaderFields...) // level 5: only the keyword source's... whose keyword is 2: none
	h.bind("myapp_L2K2", 934, ehHeaderFields...)
	h.bind("myapp_L3K1", 935, "u32 x") // not EventHeader
	st := h.tp.Status()
	if got := st[0].Tracepoints; len(got) != 1 || got[0] != "user_events:otel_L4K1" {
		t.Errorf("otel source reads %v", got)
	}
	if got := st[1].Tracepoints; len(got) != 2 || got[0] != "user_events:myapp_L4K1" || got[1] != "user_events:myapp_L2K2" {
		t.Errorf("myapp level<=4 source reads %v", got)
	}
	if got := st[2].Tracepoints; len(got) != 1 || got[0] != "user_events:myapp_L2K2" {
		t.Errorf("myapp keyword 2 source reads %v", got)
	}
	if p := st[1].Problems["user_events:myapp_L3K1"]; p == "" {
		t.Errorf("no problem reported for a tracepoint that is not EventHeader: %+v", st[1])
	}

	x := ehtest.Exporter{Version: ehtest.RustMain}
	span := ehtest.Span{Name: "GET /x", Start: time.Unix(100, 0), End: time.Unix(100, 2500), Status: ehtest.StatusError}
	p, err := x.Encode(&span)
	if err != nil {
		t.Fatal(err)
	}
	if d := h.writeEH(931, p); d["eventheader/ok"] != 1 {
		t.Fatalf("span event: %v", d)
	}
	request := func(route string, dur uint64, failed bool) []byte {
		b := ehtest.NewBuilder("Request")
		b.Struct("PartB", 2)
		b.Str("route", route).Bool("failed", failed)
		b.Struct("PartC", 1)
		b.U64("dur.ns", dur, eventheader.FormatUnsignedInt)
		return b.Payload()
	}
	for i := 1; i <= 4; i++ {
		if d := h.writeEH(932, request("/r", uint64(i*100), i == 4)); d["eventheader/ok"] != 1 {
			t.Fatalf("request: %v", d)
		}
	}
	// A Request without its duration field.
	b := ehtest.NewBuilder("Request")
	b.Struct("PartB", 1)
	b.Str("route", "/r")
	if d := h.writeEH(932, b.Payload()); d["eventheader/missing_field"] != 1 {
		t.Fatalf("request without duration: %v", d)
	}
	// An event the provider's sources do not map.
	if d := h.writeEH(932, ehtest.NewBuilder("Other").U32("x", 1, 0).Payload()); d["eventheader/other_event"] != 1 {
		t.Fatalf("other event: %v", d)
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	job := func(name string, id uint64) []byte {
		return ehtest.NewBuilder(name).U64("id", id, eventheader.FormatUnsignedInt).Payload()
	}
	h.writeEH(934, job("Begin", 7))
	h.writeEH(934, job("Begin", 8))
	h.writeEH(934, job("Done", 8))
	h.writeEH(934, job("Done", 7))
	if d := h.writeEH(934, job("Done", 7)); d["eventheader/unpaired_end"] != 1 {
		t.Fatalf("a second end: %v", d)
	}
	got := h.series()
	if sr := got["GET /x"]; sr.Count != 1 || sr.Errors != 1 || sr.SumNs != 2500 {
		t.Errorf("span: %+v", sr)
	}
	if sr := got["/r"]; sr.Count != 4 || sr.Errors != 1 || sr.SumNs != 1000 {
		t.Errorf("requests: %+v", sr)
	}
	if sr := got["job"]; sr.Count != 2 || sr.SumNs == 0 {
		t.Errorf("jobs: %+v", sr)
	}
}

// TestEventHeaderMetric: an EventHeader metric: source takes a signed
// field's values.
func TestEventHeaderMetric(t *testing.T) {
	h := newUEHarness(t, []tpsource.Source{
		{Kind: tpsource.EventHeader, Provider: "shop", Event: "Stock", Metric: "stock.level", ValueField: tpsource.Field{"PartC", "delta"}},
	})
	h.bind("shop_L4K1", 951, ehHeaderFields...)
	var sum int64
	for i := -10; i <= 20; i++ {
		sum += int64(i * 3)
		b := ehtest.NewBuilder("Stock")
		b.Struct("PartC", 1)
		b.U64("delta", uint64(int64(i*3)), eventheader.FormatSignedInt)
		if d := h.writeEH(951, b.Payload()); d["eventheader/ok"] != 1 {
			t.Fatalf("counts %v", d)
		}
	}
	s, err := h.c.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	for _, sr := range s.Series {
		if sr.Span == "stock.level" && sr.Count > 0 {
			if sr.Kind != "metric" || sr.Count != 31 || sr.Sum != sum || sr.Min != -30 || sr.Max != 60 {
				t.Errorf("stock.level: %+v, want 31 values summing to %d", sr, sum)
			}
			return
		}
	}
	t.Fatalf("no stock.level series in %+v", s.Series)
}

// TestEventHeaderRefusedLogged: events refused since the last report are
// logged by reason, once.
func TestEventHeaderRefusedLogged(t *testing.T) {
	h := newUEHarness(t, []tpsource.Source{{Kind: tpsource.EventHeader, Provider: "otel"}})
	h.bind("otel_L4K1", 961, ehHeaderFields...)
	var logs strings.Builder
	h.tp.log = slog.New(slog.NewTextHandler(&logs, nil))
	good, _ := ehtest.Golden("basic_main.golden")
	bad := append([]byte(nil), good...)
	bad[0] = 0 // big endian, no extension
	h.writeEH(961, good)
	h.writeEH(961, bad)
	h.writeEH(961, bad)
	prev := h.tp.reportRefused(nil)
	prev = h.tp.reportRefused(prev) // nothing new: nothing logged
	if got := logs.String(); strings.Count(got, "tracepoint_events_refused") != 1 || !strings.Contains(got, "eventheader_big_endian=2") || strings.Contains(got, "eventheader_ok") {
		t.Fatalf("log:\n%s", got)
	}
	_ = prev
}

// TestEventHeaderErrorPredicateAndLabels: the same vocabulary on an
// application's EventHeader events, fields by path.
func TestEventHeaderErrorPredicateAndLabels(t *testing.T) {
	h := newUEHarness(t, parseSources(t, `
eventheader:
  - provider: web
    event: Request
    span: request
    duration_field: PartC.dur
    error: "PartB.status >= 500"
    labels: {status: PartB.status}
`))
	h.bind("web_L4K1", 981, ehHeaderFields...)
	for _, code := range []uint32{200, 200, 503, 404} {
		b := ehtest.NewBuilder("Request")
		b.Struct("PartB", 1)
		b.U32("status", code, eventheader.FormatUnsignedInt)
		b.Struct("PartC", 1)
		b.U64("dur", 1000, eventheader.FormatUnsignedInt)
		if d := h.writeEH(981, b.Payload()); d["eventheader/ok"] != 1 {
			t.Fatalf("counts %v", d)
		}
	}
	s, err := h.c.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string][2]uint64{}
	for _, sr := range s.Series {
		if sr.Span == "request" && sr.Count > 0 {
			got[sr.SourceLabels["status"]] = [2]uint64{sr.Count, sr.Errors}
		}
	}
	if want := map[string][2]uint64{"200": {2, 0}, "503": {1, 1}, "404": {1, 0}}; len(got) != 3 || got["200"] != want["200"] || got["503"] != want["503"] || got["404"] != want["404"] {
		t.Errorf("series by status %v", got)
	}
}
