package eventheader_test

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"strings"
	"testing"
	"time"

	"github.com/spanwatch/spanwatch/internal/eventheader"
	"github.com/spanwatch/spanwatch/internal/eventheader/ehtest"
)

const maxName = 127 // SPAN_NAME_LEN - 1

func golden(t *testing.T, name string) []byte {
	t.Helper()
	b, err := ehtest.Golden(name)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestDecodeGoldens decodes the hand-derived golden spans.
func TestDecodeGoldens(t *testing.T) {
	for _, tc := range ehtest.GoldenCases {
		t.Run(tc.File, func(t *testing.T) {
			p := golden(t, tc.File)
			s, r := eventheader.DecodeSpan(p, maxName)
			if r != eventheader.OK {
				t.Fatalf("reason %s", r)
			}
			wantName, cut := eventheader.TruncateUTF8([]byte(tc.Span.Name), maxName)
			if s.Name != wantName || s.NameTruncated != cut {
				t.Errorf("name %q (cut %t), want %q (cut %t)", s.Name, s.NameTruncated, wantName, cut)
			}
			if d := tc.Span.End.Sub(tc.Span.Start); s.DurationNs != uint64(d) {
				t.Errorf("duration %d ns, want %d", s.DurationNs, d)
			}
			if s.StartSec != tc.Span.Start.Unix() || s.StartNsec != uint32(tc.Span.Start.Nanosecond()) ||
				s.EndSec != tc.Span.End.Unix() || s.EndNsec != uint32(tc.Span.End.Nanosecond()) {
				t.Errorf("times %d.%09d..%d.%09d, want %v..%v", s.StartSec, s.StartNsec, s.EndSec, s.EndNsec, tc.Span.Start, tc.Span.End)
			}
			if wantOK := tc.Span.Status != ehtest.StatusError; s.Success != wantOK {
				t.Errorf("success %t, want %t", s.Success, wantOK)
			}
			if s.TraceID != tc.Span.TraceID || s.SpanID != tc.Span.SpanID {
				t.Errorf("ids %x %x, want %x %x", s.TraceID, s.SpanID, tc.Span.TraceID, tc.Span.SpanID)
			}
		})
	}
}

// TestDecodeAllFields walks a whole event: every field, with its path.
func TestDecodeAllFields(t *testing.T) {
	p := golden(t, "full_main.golden")
	ev, r := eventheader.Decode(p, func(uint64) []uint64 { return []uint64{} })
	if r != eventheader.OK {
		t.Fatalf("reason %s", r)
	}
	var paths []string
	for _, f := range ev.Fields {
		paths = append(paths, f.PathString())
	}
	want := "__csver__ PartA PartA.time PartA.ext_dt_traceId PartA.ext_dt_spanId PartA.ext_cloud_role PartA.ext_cloud_roleInstance " +
		"PartB PartB._typeName PartB.name PartB.startTime PartB.success PartB.kind PartB.parentId PartB.links PartB.httpMethod " +
		"PartB.httpStatusCode PartB.httpUrl PartC PartC.retry PartC.ratio PartC.note PartC.tags"
	if got := strings.Join(paths, " "); got != want {
		t.Fatalf("paths\n got %s\nwant %s", got, want)
	}
	if ev.Name != "Span" || ev.Header.Level != 4 || ev.Header.Flags != 7 {
		t.Errorf("event %q header %+v", ev.Name, ev.Header)
	}
	// Values by path hash, as a source maps them.
	wants := []uint64{
		eventheader.Path("PartB", "httpStatusCode"), eventheader.Path("PartC", "retry"), eventheader.Path("PartB", "kind"),
		eventheader.Path("PartA", "ext_cloud_role"), eventheader.Path("PartC", "ratio"),
	}
	ev, r = eventheader.Decode(p, func(uint64) []uint64 { return wants })
	if r != eventheader.OK {
		t.Fatalf("reason %s", r)
	}
	for k, want := range []uint64{503, 1, 2} {
		if v, r := ev.Uint(p, k); r != eventheader.OK || v != want {
			t.Errorf("want %d: %d (%s), want %d", k, v, r, want)
		}
	}
	if s, r := ev.String(p, 3); r != eventheader.OK || string(s) != "checkout" {
		t.Errorf("ext_cloud_role %q (%s)", s, r)
	}
	if _, r := ev.String(p, 0); r != eventheader.ReasonFieldType {
		t.Errorf("an integer read as a string: %s, want field_type", r)
	}
	if _, r := ev.Uint(p, 3); r != eventheader.ReasonFieldType {
		t.Errorf("a string read as an integer: %s, want field_type", r)
	}
	if _, r := ev.Uint(p, 4); r != eventheader.OK {
		t.Errorf("a float read as 64 bits: %s", r) // its bits; predicates compare integers
	}
	// A name with dots is one field: PartC has "db.system.name".
	p = golden(t, "utf8_long_050.golden")
	ev, r = eventheader.Decode(p, func(uint64) []uint64 { return []uint64{eventheader.Path("PartC", "db.system.name")} })
	if s, _ := ev.String(p, 0); r != eventheader.OK || string(s) != "pg" {
		t.Errorf("PartC.db.system.name: %q (%s)", s, r)
	}
}

// meta locates the metadata of a golden event: its size field and where
// it starts and ends.
func meta(p []byte) (sizeAt, start, end int) {
	size := int(binary.LittleEndian.Uint16(p[8:]))
	return 8, 12, 12 + size
}

// mutate applies f to a copy of p.
func mutate(p []byte, f func(p []byte) []byte) []byte {
	return f(append([]byte(nil), p...))
}

// replace replaces the first old with new in p, keeping lengths.
func replace(p []byte, old, new string) []byte {
	i := bytes.Index(p, []byte(old))
	if i < 0 || len(old) != len(new) {
		panic("replace " + old)
	}
	copy(p[i:], new)
	return p
}

// cutMeta returns p with its metadata cut to n bytes, the data kept.
func cutMeta(p []byte, n int) []byte {
	_, ms, me := meta(p)
	out := append([]byte(nil), p[:ms]...)
	binary.LittleEndian.PutUint16(out[8:], uint16(n))
	out = append(out, p[ms:ms+n]...)
	return append(out, p[me:]...)
}

// malformedCases are broken variants of the basic golden span, and the
// reason each must be refused with.
func malformedCases(t *testing.T) []struct {
	name string
	p    []byte
	want eventheader.Reason
} {
	base := golden(t, "basic_main.golden")
	_, ms, me := meta(base)
	partA := bytes.Index(base[ms:me], []byte("PartA\x00")) + ms + 7 // its member count
	partB := bytes.Index(base[ms:me], []byte("PartB\x00")) + ms + 7
	// A Span whose name is an integer.
	intName := ehtest.NewBuilder("Span")
	a := intName.Struct("PartA", 3)
	intName.Str("time", "2026-01-01T00:00:01Z").Str("ext_dt_traceId", strings.Repeat("1", 32)).Str("ext_dt_spanId", strings.Repeat("2", 16))
	intName.SetCount(a, 3)
	intName.Struct("PartB", 3)
	intName.U32("name", 7, eventheader.FormatUnsignedInt).Str("startTime", "2026-01-01T00:00:00Z").Bool("success", true)
	return []struct {
		name string
		p    []byte
		want eventheader.Reason
	}{
		{"good", base, eventheader.OK},
		{"short", base[:7], eventheader.ReasonShort},
		{"big endian", mutate(base, func(p []byte) []byte { p[0] &^= eventheader.FlagLittleEndian; return p }), eventheader.ReasonByteOrder},
		{"no extension", mutate(base, func(p []byte) []byte { p[0] &^= eventheader.FlagExtension; return p }), eventheader.ReasonNoMetadata},
		{"activity id only", mutate(base, func(p []byte) []byte {
			binary.LittleEndian.PutUint16(p[10:], eventheader.ExtActivityID)
			binary.LittleEndian.PutUint16(p[8:], 16)
			return p
		}), eventheader.ReasonNoMetadata},
		{"activity id of 20 bytes", mutate(base, func(p []byte) []byte {
			binary.LittleEndian.PutUint16(p[10:], eventheader.ExtActivityID|eventheader.ExtChainFlag)
			binary.LittleEndian.PutUint16(p[8:], 20)
			return p
		}), eventheader.ReasonBadExtension},
		{"metadata past the end", mutate(base, func(p []byte) []byte {
			binary.LittleEndian.PutUint16(p[8:], uint16(len(p)))
			return p
		}), eventheader.ReasonTruncatedMeta},
		{"metadata cut inside a name", cutMeta(base, partB-ms-4), eventheader.ReasonTruncatedMeta},
		{"metadata cut after a name", cutMeta(base, partB-ms-1), eventheader.ReasonTruncatedMeta},
		{"metadata cut after a struct", cutMeta(base, partB-ms+1), eventheader.ReasonBadStruct},
		{"struct count lies high", mutate(base, func(p []byte) []byte { p[partA] = 5; return p }), eventheader.ReasonBadStruct},
		{"struct count lies low", mutate(base, func(p []byte) []byte { p[partA] = 2; return p }), eventheader.ReasonMissingField},
		{"struct of no members", mutate(base, func(p []byte) []byte { p[partB] = 0; return p }), eventheader.ReasonBadStruct},
		{"end time not RFC 3339", replace(mutate(base, nil2), "2025-07-10T23:04:08.109839907Z", "2025-07-10 23:04:08.109839907Z"), eventheader.ReasonBadTime},
		{"start time not RFC 3339", replace(mutate(base, nil2), "2025-07-10T23:04:08.109797282Z", "2025-07-10T23:04:08.109797282X"), eventheader.ReasonBadTime},
		{"end before start", replace(mutate(base, nil2), "2025-07-10T23:04:08.109839907Z", "2025-07-10T23:04:07.109839907Z"), eventheader.ReasonNegativeDuration},
		{"trace id not hex", replace(mutate(base, nil2), "0af7651916cd43dd", "0af7651916cd43dg"), eventheader.ReasonBadID},
		{"data truncated", base[:len(base)-5], eventheader.ReasonTruncatedData},
		{"unknown encoding", replace(mutate(base, nil2), "__csver__\x00\x84", "__csver__\x00\x9f"), eventheader.ReasonUnsupported},
		{"name is an integer", intName.Payload(), eventheader.ReasonFieldType},
		{"other event", replace(mutate(base, nil2), "Span\x00__", "Spam\x00__"), eventheader.ReasonOtherEvent},
	}
}

func nil2(p []byte) []byte { return p }

func TestDecodeMalformed(t *testing.T) {
	for _, tc := range malformedCases(t) {
		t.Run(tc.name, func(t *testing.T) {
			_, r := eventheader.DecodeSpan(tc.p, maxName)
			if r != tc.want {
				t.Fatalf("reason %s, want %s", r, tc.want)
			}
		})
	}
}

// TestDecodeLimits: the walk limits refuse an event as too large rather
// than guess.
func TestDecodeLimits(t *testing.T) {
	x := ehtest.Exporter{Version: ehtest.RustMain}
	s := ehtest.Span{Name: "n", Start: time.Unix(1, 0), End: time.Unix(2, 0)}
	for i := 0; i < 70; i++ {
		s.Attributes = append(s.Attributes, ehtest.KV{Key: "a" + strings.Repeat("x", i%5) + string(rune('a'+i%26)), Value: int64(i)})
	}
	p, err := x.Encode(&s)
	if err != nil {
		t.Fatal(err)
	}
	// The span's own fields come before PartC: found within the limits.
	if _, r := eventheader.DecodeSpan(p, maxName); r != eventheader.OK {
		t.Fatalf("span with 70 PartC attributes: %s", r)
	}
	// A field after MaxFields others is out of reach.
	_, r := eventheader.Decode(p, func(uint64) []uint64 { return []uint64{eventheader.Path("PartC", "nope")} })
	if r != eventheader.ReasonTooLarge {
		t.Fatalf("a field past %d fields: %s, want too_large", eventheader.MaxFields, r)
	}
	// A payload larger than the decoder's buffer whose fields lie past it.
	s.Attributes = nil
	s.Name = strings.Repeat("n", eventheader.BufSize)
	p, err = x.Encode(&s)
	if err != nil {
		t.Fatal(err)
	}
	if _, r := eventheader.DecodeSpan(p, maxName); r != eventheader.ReasonTooLarge {
		t.Fatalf("name of %d bytes: %s, want too_large", len(s.Name), r)
	}
}

func TestParseRFC3339(t *testing.T) {
	for _, tc := range []struct {
		s  string
		ok bool
	}{
		{"2026-01-02T03:04:05Z", true},
		{"2026-01-02t03:04:05z", true},
		{"2026-01-02T03:04:05.1Z", true},
		{"2026-01-02T03:04:05.123456789Z", true},
		{"2026-01-02T03:04:05.1234567891234567891234Z", true}, // digits past 9 dropped
		{"2026-01-02T03:04:05+05:30", true},
		{"2026-01-02T03:04:05.5-08:00", true},
		{"2024-02-29T00:00:00Z", true},
		{"2000-02-29T00:00:00Z", true},
		{"0000-01-01T00:00:00Z", true},
		{"9999-12-31T23:59:59.999999999+23:59", true},
		{"2016-12-31T23:59:60Z", true}, // a leap second
		{"2023-02-29T00:00:00Z", false},
		{"1900-02-29T00:00:00Z", false},
		{"2026-13-01T00:00:00Z", false},
		{"2026-04-31T00:00:00Z", false},
		{"2026-01-02T24:00:00Z", false},
		{"2026-01-02T03:60:00Z", false},
		{"2026-01-02T03:04:61Z", false},
		{"2026-01-02 03:04:05Z", false},
		{"2026-01-02T03:04:05", false},
		{"2026-01-02T03:04:05.Z", false},
		{"2026-01-02T03:04:05+0530", false},
		{"2026-01-02T03:04:05+24:00", false},
		{"2026-01-02T03:04:05Z ", false},
		{"2026-1-02T03:04:05Z", false},
		{"2026-01-02T03:04:05.1234567890123456789012345678901234567890123456789Z", false}, // over MaxTimeLen
	} {
		sec, nsec, ok := eventheader.ParseRFC3339([]byte(tc.s))
		if ok != tc.ok {
			t.Errorf("%s: ok %t, want %t", tc.s, ok, tc.ok)
			continue
		}
		if !ok || strings.Contains(tc.s, ":60") {
			continue
		}
		want, err := time.Parse(time.RFC3339Nano, strings.ToUpper(tc.s))
		if err != nil {
			t.Fatalf("%s: Go refuses it: %v", tc.s, err)
		}
		if sec != want.Unix() || nsec != uint32(want.Nanosecond()) {
			t.Errorf("%s: %d.%09d, want %d.%09d", tc.s, sec, nsec, want.Unix(), want.Nanosecond())
		}
	}
}

// TestDurationAcrossMidnight: a span from 23:59:59.9 to 00:00:00.1 the
// next day, written with different offsets, is 200 ms.
func TestDurationAcrossMidnight(t *testing.T) {
	start, _, _ := eventheader.ParseRFC3339([]byte("2025-12-31T23:59:59.9Z"))
	end, endNs, _ := eventheader.ParseRFC3339([]byte("2026-01-01T01:00:00.1+01:00"))
	if d := (end-start)*1e9 + int64(endNs) - 900_000_000; d != 200_000_000 {
		t.Fatalf("duration %d ns, want 200 ms", d)
	}
}

func TestParseTracepoint(t *testing.T) {
	for _, tc := range []struct {
		name string
		ok   bool
		want eventheader.Tracepoint
	}{
		{"opentelemetry_traces_L4K1", true, eventheader.Tracepoint{Provider: "opentelemetry_traces", Level: 4, Keyword: 1}},
		{"MyProvider_L3K2a", true, eventheader.Tracepoint{Provider: "MyProvider", Level: 3, Keyword: 0x2a}},
		{"OtherProvider_L5K0Gperf", true, eventheader.Tracepoint{Provider: "OtherProvider", Level: 5, Keyword: 0, Options: "Gperf"}},
		{"a_L1_L4Kff", true, eventheader.Tracepoint{Provider: "a_L1", Level: 4, Keyword: 0xff}},
		{"spanwatch_span", false, eventheader.Tracepoint{}},
		{"p_L0K1", false, eventheader.Tracepoint{}},
		{"p_L4K", false, eventheader.Tracepoint{}},
		{"p_L4KFF", false, eventheader.Tracepoint{}},
		{"p_L4K1g", false, eventheader.Tracepoint{}},
		{"_L4K1", false, eventheader.Tracepoint{}},
	} {
		got, ok := eventheader.ParseTracepoint(tc.name)
		if ok != tc.ok || got != tc.want {
			t.Errorf("%s: %+v %t, want %+v %t", tc.name, got, ok, tc.want, tc.ok)
		}
		if ok && got.String() != tc.name {
			t.Errorf("%s: String() = %s", tc.name, got.String())
		}
	}
}

func TestNameHash(t *testing.T) {
	// Names of 7, 8 and 9 bytes: the NUL ends the first word, starts the
	// second, or sits in the second.
	seen := map[uint64]string{}
	for _, n := range []string{"", "a", "abcdefg", "abcdefgh", "abcdefghi", "PartB", "name", "PartB.name"} {
		h := eventheader.NameHash(n)
		if prev, dup := seen[h]; dup {
			t.Errorf("%q and %q hash alike", n, prev)
		}
		seen[h] = n
	}
	if eventheader.Path("PartB", "name") == eventheader.Path("PartB.name") {
		t.Error("a path and a dotted name hash alike")
	}
	if hex.EncodeToString(nil) != "" {
		t.Fatal()
	}
}
