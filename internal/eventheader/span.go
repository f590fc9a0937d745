package eventheader

import "unicode/utf8"

// SpanEvent is the event name the OpenTelemetry user_events trace
// exporters give every span.
const SpanEvent = "Span"

// The fields a span is made of, in the order of Span's wants: the name,
// the end and start times (RFC 3339), success, and the trace and span ids
// (lowercase hex).
var SpanFields = [][]string{
	{"PartB", "name"},
	{"PartA", "time"},
	{"PartB", "startTime"},
	{"PartB", "success"},
	{"PartA", "ext_dt_traceId"},
	{"PartA", "ext_dt_spanId"},
}

// Indexes in SpanFields.
const (
	SpanName = iota
	SpanEnd
	SpanStart
	SpanSuccess
	SpanTraceID
	SpanSpanID
)

// SpanWants are the path hashes of SpanFields.
func SpanWants() []uint64 {
	out := make([]uint64, len(SpanFields))
	for i, p := range SpanFields {
		out[i] = Path(p...)
	}
	return out
}

// A Span is what the decoders take from a Span event.
type Span struct {
	Name       string
	StartSec   int64
	StartNsec  uint32
	EndSec     int64
	EndNsec    uint32
	DurationNs uint64
	Success    bool
	TraceID    [16]byte
	SpanID     [8]byte
	// NameTruncated is set when the name was longer than the span name
	// buffer and was cut (on a UTF-8 character boundary).
	NameTruncated bool
}

// maxDurationSec bounds a span's duration so its nanoseconds fit an int64.
const maxDurationSec = 9_000_000_000

// DecodeSpan decodes a Span event as the BPF decoder does. maxName is the
// longest name the span event holds (SPAN_NAME_LEN - 1).
func DecodeSpan(p []byte, maxName int) (Span, Reason) {
	wants := SpanWants()
	spanHash := NameHash(SpanEvent)
	ev, r := Decode(p, func(h uint64) []uint64 {
		if h == spanHash {
			return wants
		}
		return nil
	})
	var s Span
	if r != OK {
		return s, r
	}
	name, r := ev.String(p, SpanName)
	if r != OK {
		return s, r
	}
	s.Name, s.NameTruncated = TruncateUTF8(name, maxName)
	var ok bool
	for _, t := range []struct {
		k    int
		sec  *int64
		nsec *uint32
	}{{SpanEnd, &s.EndSec, &s.EndNsec}, {SpanStart, &s.StartSec, &s.StartNsec}} {
		v, r := ev.String(p, t.k)
		if r != OK {
			return s, r
		}
		if *t.sec, *t.nsec, ok = ParseRFC3339(v); !ok {
			return s, ReasonBadTime
		}
	}
	ds := s.EndSec - s.StartSec
	if ds < 0 || ds > maxDurationSec {
		return s, ReasonNegativeDuration
	}
	d := ds*1_000_000_000 + int64(s.EndNsec) - int64(s.StartNsec)
	if d < 0 {
		return s, ReasonNegativeDuration
	}
	s.DurationNs = uint64(d)
	if ev.Found[SpanSuccess] < 0 {
		return s, ReasonMissingField
	}
	f := &ev.Fields[ev.Found[SpanSuccess]]
	if b := f.Base(); f.IsArray() || b != EncValue8 && b != EncValue16 && b != EncValue32 {
		return s, ReasonFieldType
	}
	v, _ := ev.Uint(p, SpanSuccess)
	s.Success = v != 0
	for _, id := range []struct {
		k   int
		dst []byte
	}{{SpanTraceID, s.TraceID[:]}, {SpanSpanID, s.SpanID[:]}} {
		v, r := ev.String(p, id.k)
		if r != OK {
			return s, r
		}
		if !ParseHexID(v, id.dst) {
			return s, ReasonBadID
		}
	}
	return s, OK
}

// ParseHexID decodes exactly 2*len(dst) hex digits (either case).
func ParseHexID(s []byte, dst []byte) bool {
	if len(s) != 2*len(dst) {
		return false
	}
	for i := range dst {
		hi, ok1 := unhex(s[2*i])
		lo, ok2 := unhex(s[2*i+1])
		if !ok1 || !ok2 {
			return false
		}
		dst[i] = hi<<4 | lo
	}
	return true
}

func unhex(c byte) (byte, bool) {
	switch {
	case c >= '0' && c <= '9':
		return c - '0', true
	case c >= 'a' && c <= 'f':
		return c - 'a' + 10, true
	case c >= 'A' && c <= 'F':
		return c - 'A' + 10, true
	}
	return 0, false
}

// TruncateUTF8 cuts b to at most max bytes, backing up over at most three
// UTF-8 continuation bytes so that a character is never split, and
// reports whether it cut. Invalid UTF-8 is kept as it is.
func TruncateUTF8(b []byte, max int) (string, bool) {
	if len(b) <= max {
		return string(b), false
	}
	n := max
	for n > 0 && n > max-(utf8.UTFMax-1) && b[n]&0xc0 == 0x80 {
		n--
	}
	return string(b[:n]), true
}
