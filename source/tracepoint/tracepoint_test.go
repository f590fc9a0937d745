//go:build linux

package tracepoint

import (
	"context"
	"encoding/binary"
	"fmt"
	"reflect"
	"runtime"
	"strings"
	"testing"

	"github.com/cilium/ebpf"
	"gopkg.in/yaml.v3"

	"github.com/spanwatch/spanwatch/bpf"
	"github.com/spanwatch/spanwatch/collector"
	"github.com/spanwatch/spanwatch/config/section"
	"github.com/spanwatch/spanwatch/internal/bpftest"
	"github.com/spanwatch/spanwatch/internal/kernel"
	"github.com/spanwatch/spanwatch/internal/tpsource"
	"github.com/spanwatch/spanwatch/internal/tracefs"
	"github.com/spanwatch/spanwatch/snapshot"
)

// ueFormat writes the format file kernel 6.12 prints for a user_event
// registered with these fields (f_show in kernel/trace/trace_events.c),
// after the 8 bytes of common fields.
func ueFormat(name string, id uint32, fields ...string) []byte {
	var b strings.Builder
	fmt.Fprintf(&b, "name: %s\nID: %d\nformat:\n", name, id)
	b.WriteString("\tfield:unsigned short common_type;\toffset:0;\tsize:2;\tsigned:0;\n")
	b.WriteString("\tfield:unsigned char common_flags;\toffset:2;\tsize:1;\tsigned:0;\n")
	b.WriteString("\tfield:unsigned char common_preempt_count;\toffset:3;\tsize:1;\tsigned:0;\n")
	b.WriteString("\tfield:int common_pid;\toffset:4;\tsize:4;\tsigned:1;\n\n")
	off := 8
	for _, f := range fields {
		typ, fname, _ := strings.Cut(f, " ")
		size := map[string]int{"u64": 8, "s64": 8, "u32": 4, "s32": 4, "u16": 2, "u8": 1}[typ]
		decl := typ + " " + fname
		switch {
		case strings.HasPrefix(typ, "char["):
			fmt.Sscanf(typ, "char[%d]", &size)
			decl = "char " + fname + typ[4:]
		case typ == "rel_loc":
			size, decl = 4, "__rel_loc char "+fname+"[]"
		case typ == "data_loc":
			size, decl = 4, "__data_loc char[] "+fname
		}
		signed := 0
		if typ[0] != 'u' {
			signed = 1
		}
		fmt.Fprintf(&b, "\tfield:%s;\toffset:%d;\tsize:%d;\tsigned:%d;\n", decl, off, size, signed)
		off += size
	}
	b.WriteString("\nprint fmt: \"\"\n")
	return []byte(b.String())
}

type ueHarness struct {
	t    *testing.T
	c    *collector.Collector
	tp   *Source
	prev map[string]uint64
}

func newUEHarness(t *testing.T, srcs []tpsource.Source) *ueHarness {
	bpftest.Require(t, kernel.Loop, kernel.Atomics)
	c := newTestCollector(t, collector.Config{})
	tp, err := Attach(context.Background(), c.SourceCore(), srcs, Config{test: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tp.Close() })
	return &ueHarness{t: t, c: c, tp: tp, prev: map[string]uint64{}}
}

func (h *ueHarness) bind(name string, id uint32, fields ...string) {
	h.t.Helper()
	f, err := tracefs.ParseFormat("format", ueFormat(name, id, fields...))
	if err != nil {
		h.t.Fatal(err)
	}
	if err := h.tp.Bind(tracefs.Event{System: tracefs.SystemUserEvents, Name: name}, f); err != nil {
		h.t.Fatal(err)
	}
}

// write runs the user_events program on a record of event id whose
// payload (after the common fields) is p, and returns the counts that
// moved.
func (h *ueHarness) write(id uint32, p []byte) map[string]uint64 {
	h.t.Helper()
	var in bpf.UsereventsUeTestIn
	in.Type = id
	n := copy(in.Record[8:], p)
	binary.LittleEndian.PutUint16(in.Record[0:], uint16(id))
	in.EntrySize = uint32(8 + n)
	if err := h.tp.ue.testInput.Put(uint32(0), &in); err != nil {
		h.t.Fatal(err)
	}
	if _, err := h.tp.ue.prog.Run(&ebpf.RunOptions{Context: make([]byte, 8)}); err != nil {
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

func (h *ueHarness) series() map[string]snapshot.Series {
	h.t.Helper()
	s, err := h.c.Snapshot()
	if err != nil {
		h.t.Fatal(err)
	}
	out := map[string]snapshot.Series{}
	for _, sr := range s.Series {
		if sr.Count > 0 {
			out[sr.Span] = sr
		}
	}
	return out
}

func le64(v uint64) []byte { return binary.LittleEndian.AppendUint64(nil, v) }
func le32(v uint32) []byte { return binary.LittleEndian.AppendUint32(nil, v) }
func cat(b ...[]byte) []byte {
	var out []byte
	for _, x := range b {
		out = append(out, x...)
	}
	return out
}
func chars(s string, n int) []byte { b := make([]byte, n); copy(b, s); return b }

// TestUserEventFields: a user_event with a duration, a status and a name
// in each string kind is cast by its format's offsets.
func TestUserEventFields(t *testing.T) {
	h := newUEHarness(t, []tpsource.Source{
		{Kind: tpsource.UserEvents, Event: "uev_req", NameField: tpsource.Field{"route"}, DurationField: tpsource.Field{"dur_ns"}, StatusField: tpsource.Field{"status"}},
		{Kind: tpsource.UserEvents, Event: "uev_rel", NameField: tpsource.Field{"name"}, DurationField: tpsource.Field{"d"}},
		{Kind: tpsource.UserEvents, Event: "uev_data", NameField: tpsource.Field{"name"}, DurationField: tpsource.Field{"d"}},
		{Kind: tpsource.UserEvents, Event: "uev_fixed", Span: "fixed.span", DurationField: tpsource.Field{"d32"}, StatusField: tpsource.Field{"code"}},
	})
	h.bind("uev_req", 901, "u64 dur_ns", "s32 status", "char[16] route")
	h.bind("uev_rel", 902, "u32 d", "rel_loc name")
	h.bind("uev_data", 903, "data_loc name", "u64 d")
	h.bind("uev_fixed", 904, "u8 code", "u32 d32")
	for i := 1; i <= 10; i++ {
		status := uint32(0)
		if i%5 == 0 {
			status = uint32(0xffffffff) // -1: an error
		}
		if d := h.write(901, cat(le64(uint64(i*1000)), le32(status), chars("GET /a", 16))); d["user_events/ok"] != 1 {
			t.Fatalf("counts %v", d)
		}
	}
	// __rel_loc: offset from the field's end (payload offset 8), length
	// with the NUL; __data_loc: offset from the record's start.
	name := "rel.name"
	h.write(902, cat(le32(5000), le32(uint32(len(name)+1)<<16|0), []byte(name), []byte{0}))
	name = strings.Repeat("ü", 80) // 160 bytes: cut to 126 on a character boundary
	d := h.write(903, cat(le32(uint32(len(name)+1)<<16|(8+12)), le64(7000), []byte(name), []byte{0}))
	if d["user_events/ok"] != 1 {
		t.Fatalf("counts %v", d)
	}
	h.write(904, cat([]byte{3}, le32(9000)))
	got := h.series()
	want := map[string][3]uint64{ // count, errors, sum
		"GET /a":                {10, 2, 55000},
		"rel.name":              {1, 0, 5000},
		strings.Repeat("ü", 63): {1, 0, 7000},
		"fixed.span":            {1, 1, 9000},
	}
	for n, w := range want {
		sr, ok := got[n]
		if !ok || sr.Count != w[0] || sr.Errors != w[1] || sr.SumNs != w[2] {
			t.Errorf("series %q: %+v, want count %d errors %d sum %d", n, sr, w[0], w[1], w[2])
		}
	}
	if len(got) != len(want) {
		t.Errorf("series %v", got)
	}
	// A __data_loc past the record is refused.
	if d := h.write(903, cat(le32(200<<16|20), le64(1))); d["user_events/bad_loc"] != 1 {
		t.Fatalf("bad loc: %v", d)
	}
	// A record shorter than the fields (the kernel would refuse it).
	if d := h.write(901, le64(1)); d["user_events/short"] != 1 {
		t.Fatalf("short: %v", d)
	}
	s, err := h.c.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	if len(seriesByName(s)) != 0 {
		t.Fatal("refused events were aggregated")
	}
	// The snapshot says so, by source and reason (and /metrics after it).
	if se := s.Stats.SourceEvents; se["user_events/bad_loc"] != 1 || se["user_events/short"] != 1 {
		t.Fatalf("snapshot source events %v, want bad_loc 1 and short 1", se)
	}
}

// TestUserEventPairs: a start event and an end event, paired by thread or
// by a key field, time the span in the kernel.
func TestUserEventPairs(t *testing.T) {
	h := newUEHarness(t, []tpsource.Source{
		{Kind: tpsource.UserEvents, Start: "uev_begin", End: "uev_end", Span: "by.thread", StatusField: tpsource.Field{"status"}},
		{Kind: tpsource.UserEvents, Start: "uev_kbegin", End: "uev_kend", NameField: tpsource.Field{"route"}, KeyField: tpsource.Field{"req"}},
	})
	h.bind("uev_begin", 911, "u32 x")
	h.bind("uev_end", 912, "u16 status")
	h.bind("uev_kbegin", 913, "u64 req", "char[8] route")
	h.bind("uev_kend", 914, "u64 req")
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if d := h.write(912, []byte{0, 0}); d["user_events/unpaired_end"] != 1 {
		t.Fatalf("an end without start: %v", d)
	}
	for i := 0; i < 5; i++ {
		h.write(911, le32(0))
		h.write(912, []byte{byte(i % 2), 0})
	}
	// Two requests interleaved, told apart by key.
	h.write(913, cat(le64(1), chars("/one", 8)))
	h.write(913, cat(le64(2), chars("/two", 8)))
	h.write(914, le64(2))
	h.write(914, le64(1))
	if d := h.write(914, le64(1)); d["user_events/unpaired_end"] != 1 {
		t.Fatalf("a second end: %v", d)
	}
	got := h.series()
	if sr := got["by.thread"]; sr.Count != 5 || sr.Errors != 2 || sr.SumNs == 0 {
		t.Errorf("by.thread: %+v", sr)
	}
	if got["/one"].Count != 1 || got["/two"].Count != 1 {
		t.Errorf("keyed: %+v", got)
	}
}

// TestUserEventFieldProblems: a field the event lacks, or of the wrong
// type, keeps the source off that event, with a suggestion.
func TestUserEventFieldProblems(t *testing.T) {
	h := newUEHarness(t, []tpsource.Source{
		{Kind: tpsource.UserEvents, Event: "uev_req", Span: "s", DurationField: tpsource.Field{"dur_sn"}, StatusField: tpsource.Field{"route"}, Pos: section.Pos{File: "r.yaml", Line: 3, Col: 7}},
	})
	h.bind("uev_req", 921, "u64 dur_ns", "char[8] route")
	st := h.tp.Status()
	if len(st) != 1 || len(st[0].Tracepoints) != 0 {
		t.Fatalf("status %+v", st)
	}
	p := st[0].Problems["user_events:uev_req"]
	for _, w := range []string{"event uev_req has no field dur_sn (it has: dur_ns, route); did you mean dur_ns?",
		"status_field route: field route of event uev_req is char[8], want an integer"} {
		if !strings.Contains(p, w) {
			t.Errorf("problem %q lacks %q", p, w)
		}
	}
	if d := h.write(921, cat(le64(1), chars("x", 8))); len(d) != 0 {
		t.Errorf("an unbound event was decoded: %v", d)
	}
}

// TestUserEventMetric: a metric: source sums a signed field, negative
// values included, into a value series.
func TestUserEventMetric(t *testing.T) {
	h := newUEHarness(t, []tpsource.Source{
		{Kind: tpsource.UserEvents, Event: "uev_stock", Metric: "stock.delta", ValueField: tpsource.Field{"delta"}},
		{Kind: tpsource.UserEvents, Event: "uev_bytes", Metric: "bytes.sent", ValueField: tpsource.Field{"n"}, StatusField: tpsource.Field{"err"}},
	})
	h.bind("uev_stock", 941, "u32 pad", "s32 delta")
	h.bind("uev_bytes", 942, "u64 n", "u8 err")
	var sum int64
	for i := -50; i <= 100; i++ {
		v := int32(i * 7)
		sum += int64(v)
		if d := h.write(941, cat(le32(0), le32(uint32(v)))); d["user_events/ok"] != 1 {
			t.Fatalf("counts %v", d)
		}
	}
	h.write(942, cat(le64(1500), []byte{0}))
	h.write(942, cat(le64(500), []byte{1}))
	s, err := h.c.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]snapshot.Series{}
	for _, sr := range s.Series {
		if sr.Count > 0 {
			got[sr.Span] = sr
		}
	}
	if sr := got["stock.delta"]; sr.Kind != "metric" || sr.Count != 151 || sr.Sum != sum || sr.Min != -350 || sr.Max != 700 {
		t.Errorf("stock.delta: %+v, want a metric of 151 values summing to %d, min -350, max 700", sr, sum)
	}
	if sr := got["bytes.sent"]; sr.Kind != "metric" || sr.Count != 2 || sr.Sum != 2000 || sr.Errors != 1 {
		t.Errorf("bytes.sent: %+v", sr)
	}
}

// parseSources decodes a sources: section for tests.
func parseSources(t *testing.T, doc string) []tpsource.Source {
	t.Helper()
	var node yaml.Node
	if err := yaml.Unmarshal([]byte(doc), &node); err != nil {
		t.Fatal(err)
	}
	// The lists of the sources: section, as package config hands them
	// to internal/tpsource.
	d := section.NewDecoder("rules.yaml", nil)
	var srcs []tpsource.Source
	for m, i := node.Content[0], 0; i+1 < len(m.Content); i += 2 {
		srcs = append(srcs, tpsource.DecodeSources(d, tpsource.Kind(m.Content[i].Value), m.Content[i+1])...)
	}
	if err := d.Err(); err != nil {
		t.Fatal(err)
	}
	return srcs
}

// TestUserEventErrorPredicateAndLabels: errors are exactly the events an
// error: predicate over fields holds for (signed and unsigned compared
// right), and labels: split the series by field values, past the cap into
// "other".
func TestUserEventErrorPredicateAndLabels(t *testing.T) {
	h := newUEHarness(t, parseSources(t, `
user_events:
  - event: uev_http
    name_field: route
    duration_field: dur_ns
    error: "status >= 500 or delta < -10"
    labels: {code: status}
    label_cap: 2
`))
	h.bind("uev_http", 971, "u64 dur_ns", "u32 status", "s32 delta", "char[8] route")
	st := h.tp.Status()
	if len(st[0].Tracepoints) != 1 {
		t.Fatalf("status %+v", st)
	}
	for _, e := range []struct {
		status uint32
		delta  int32
	}{{200, 0}, {200, -11}, {503, 5}, {404, 0}, {200, -10}, {500, 100}, {201, 0}} {
		if d := h.write(971, cat(le64(1000), le32(e.status), le32(uint32(e.delta)), chars("/x", 8))); d["user_events/ok"] != 1 {
			t.Fatalf("counts %v", d)
		}
	}
	s, err := h.c.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	byCode := map[string][2]uint64{}
	for _, sr := range s.Series {
		if sr.Span == "/x" && sr.Count > 0 {
			c := byCode[sr.SourceLabels["code"]]
			byCode[sr.SourceLabels["code"]] = [2]uint64{c[0] + sr.Count, c[1] + sr.Errors}
		}
	}
	// The first two codes seen (200, 503) are kept; 404, 500 and 201 are
	// "other". Errors: 200/-11, 503/5, 500/100.
	want := map[string][2]uint64{"200": {3, 1}, "503": {1, 1}, "other": {3, 1}}
	if !reflect.DeepEqual(byCode, want) {
		t.Errorf("series by code %v, want %v", byCode, want)
	}
	if c, _ := h.tp.Counts(); c["user_events/label_other"] != 3 {
		t.Errorf("counts %v, want user_events/label_other 3", c)
	}
}

// seriesByName keys a snapshot's series with values by span name.
func seriesByName(s *snapshot.Snapshot) map[string]snapshot.Series {
	out := map[string]snapshot.Series{}
	for _, sr := range s.Series {
		if sr.Count > 0 {
			out[sr.Span] = sr
		}
	}
	return out
}
