// Package ehtest writes spans the way the OpenTelemetry Rust user_events
// trace exporter (opentelemetry-user-events-trace) does, byte for byte: an
// EventHeader event named "Span" on the tracepoint PROVIDER_L4K1. It is
// written from that exporter's source and the EventHeader specification
// (LinuxTracepoints' eventheader.h, the eventheader_dynamic crate's
// EventBuilder), not from a decoder, for tests of spanwatch's decoders;
// testdata/README.md explains the golden files derived from it.
package ehtest

import (
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"strings"
	"time"
)

// A Version selects which release of the Rust exporter to imitate.
type Version int

const (
	// Rust050 is opentelemetry-user-events-trace 0.5.0: times formatted
	// with chrono's to_rfc3339() ("+00:00"), well-known attribute keys of
	// the older semantic conventions (db.system, db.name, db.statement,
	// messaging.destination), no links, no statusMessage.
	Rust050 Version = iota
	// RustMain is the exporter at commit 9c8db07c (the "vNext" of its
	// changelog): times end in "Z", stable semantic-convention keys
	// (db.system.name, db.namespace, db.query.text,
	// messaging.destination.name, rpc.*), PartB.links and
	// PartB.statusMessage.
	RustMain
)

func (v Version) String() string {
	if v == Rust050 {
		return "0.5.0"
	}
	return "main@9c8db07c"
}

// wellKnown maps attribute keys to the PartB field names the exporter
// gives them (get_well_known_attributes).
func (v Version) wellKnown() map[string]string {
	if v == Rust050 {
		return map[string]string{
			"db.system": "dbSystem", "db.name": "dbName", "db.statement": "dbStatement",
			"http.request.method": "httpMethod", "url.full": "httpUrl", "http.response.status_code": "httpStatusCode",
			"messaging.system": "messagingSystem", "messaging.destination": "messagingDestination", "messaging.url": "messagingUrl",
		}
	}
	return map[string]string{
		"db.system.name": "dbSystem", "db.namespace": "dbName", "db.query.text": "dbStatement",
		"http.request.method": "httpMethod", "url.full": "httpUrl", "http.response.status_code": "httpStatusCode",
		"messaging.system": "messagingSystem", "messaging.destination.name": "messagingDestination", "messaging.url": "messagingUrl",
		"rpc.system.name": "rpcSystem", "rpc.response.status_code": "rpcGrpcStatusCode",
	}
}

// Status is an OpenTelemetry span status.
type Status int

const (
	StatusUnset Status = iota
	StatusOK
	StatusError
)

// A KV is a span attribute. Value is a bool, an int64 (or int), a float64
// or a string; anything else is written as an empty string, as the
// exporter does for arrays.
type KV struct {
	Key   string
	Value any
}

// A Link is a span link.
type Link struct {
	TraceID [16]byte
	SpanID  [8]byte
}

// A Span is the part of an OpenTelemetry SpanData the exporter reads.
type Span struct {
	Name       string
	Start, End time.Time
	TraceID    [16]byte
	SpanID     [8]byte
	ParentID   [8]byte // zero: a root span (no PartB.parentId)
	Kind       int     // 0 internal, 1 server, 2 client, 3 producer, 4 consumer
	Status     Status
	StatusDesc string // with StatusError
	Attributes []KV
	Links      []Link
}

// An Exporter holds what the Rust exporter holds besides the span: the
// cloud role fields it takes from the resource's service.name and
// service.instance.id ("" when the resource has none).
type Exporter struct {
	Version           Version
	CloudRole         string
	CloudRoleInstance string
}

// Level and Keyword of the exporter's one event set (Level::Informational,
// keyword 1): its tracepoint is PROVIDER_L4K1.
const (
	Level   = 4
	Keyword = 1
)

// TracepointName is the tracepoint the exporter registers for provider.
func TracepointName(provider string) string {
	return fmt.Sprintf("%s_L%xK%x", provider, Level, Keyword)
}

// Format is the user_events format the exporter registers for provider
// (eventheader's CommandString::format).
func Format(provider string) string {
	return TracepointName(provider) + " u8 eventheader_flags; u8 version; u16 id; u16 tag; u8 opcode; u8 level"
}

// ErrTooLarge is the exporter's ERANGE: metadata and data together over
// 65535 - (52 + 16) bytes are not written.
var ErrTooLarge = errors.New("event larger than EventBuilder allows (ERANGE)")

// Encoding and format bytes, as eventheader_dynamic writes them.
const (
	encStruct  = 1
	encValue8  = 2
	encValue32 = 4
	encValue64 = 5
	encString8 = 10 // StringLength16Char8

	fmtUnsigned = 1
	fmtSigned   = 2
	fmtBoolean  = 7
	fmtFloat    = 8
)

// A Builder is eventheader_dynamic's EventBuilder: an event's metadata
// (its name, then one definition per field) and its data, kept apart and
// joined by Payload. Encode builds spans with it; tests build other
// EventHeader events (and broken ones) with it.
type Builder struct {
	meta, data []byte
	// Level is the header's level (default 4).
	Level uint8
	// Flags are the header's flags (default 0x07: pointer64, little
	// endian, extension).
	Flags uint8
}

// NewBuilder starts an event called name (EventBuilder::reset).
func NewBuilder(name string) *Builder {
	b := &Builder{Level: Level, Flags: 0x07}
	b.meta = append(append(b.meta, name...), 0)
	return b
}

// Meta adds a field definition (raw_add_meta with a zero field tag): the
// name, its NUL, then the encoding alone when the format is 0, else the
// encoding with its chain flag and the format.
func (b *Builder) Meta(name string, enc, format byte) *Builder {
	b.meta = append(b.meta, name...)
	b.meta = append(b.meta, 0)
	if format != 0 {
		b.meta = append(b.meta, 0x80|enc, format)
	} else {
		b.meta = append(b.meta, enc)
	}
	return b
}

// MetaRaw appends raw metadata bytes (a constant array's length after its
// field's definition).
func (b *Builder) MetaRaw(v ...byte) *Builder {
	b.meta = append(b.meta, v...)
	return b
}

// Data appends raw value bytes.
func (b *Builder) Data(v ...byte) *Builder {
	b.data = append(b.data, v...)
	return b
}

// Str is add_str for a &str: StringLength16Char8, a u16 length, the bytes.
func (b *Builder) Str(name, v string) *Builder {
	b.Meta(name, encString8, 0)
	b.data = binary.LittleEndian.AppendUint16(b.data, uint16(len(v)))
	b.data = append(b.data, v...)
	return b
}

// U32 is add_value of a u32 or i32 with a format.
func (b *Builder) U32(name string, v uint32, format byte) *Builder {
	b.Meta(name, encValue32, format)
	b.data = binary.LittleEndian.AppendUint32(b.data, v)
	return b
}

// U64 is add_value of a u64 or i64 with a format.
func (b *Builder) U64(name string, v uint64, format byte) *Builder {
	b.Meta(name, encValue64, format)
	b.data = binary.LittleEndian.AppendUint64(b.data, v)
	return b
}

// Bool is add_value of a bool: Value8, format Boolean.
func (b *Builder) Bool(name string, v bool) *Builder {
	b.Meta(name, encValue8, fmtBoolean)
	if v {
		b.data = append(b.data, 1)
	} else {
		b.data = append(b.data, 0)
	}
	return b
}

// Struct is add_struct_with_bookmark: it returns where the member count
// is, for SetCount (set_struct_field_count).
func (b *Builder) Struct(name string, count byte) int {
	b.Meta(name, encStruct, count)
	return len(b.meta) - 1
}

// SetCount sets the member count of the struct at bookmark at.
func (b *Builder) SetCount(at int, count byte) {
	b.meta[at] = b.meta[at]&0x80 | count&0x7f
}

// Attribute is add_attribute_to_event.
func (b *Builder) Attribute(name string, v any) *Builder {
	switch v := v.(type) {
	case bool:
		b.Bool(name, v)
	case int:
		b.Attribute(name, int64(v))
	case int64:
		b.U64(name, uint64(v), fmtSigned)
	case float64:
		b.U64(name, math.Float64bits(v), fmtFloat)
	case string:
		b.Str(name, v)
	default:
		b.Str(name, "")
	}
	return b
}

// Payload joins the event as write_eventheader hands it to the kernel
// after the write index: the 8-byte eventheader (version, id, tag and
// opcode 0), the metadata extension's header (its size, kind 1 without
// the chain flag), the metadata, the data.
func (b *Builder) Payload() []byte {
	out := make([]byte, 0, 12+len(b.meta)+len(b.data))
	out = append(out, b.Flags, 0, 0, 0, 0, 0, 0, b.Level)
	out = binary.LittleEndian.AppendUint16(out, uint16(len(b.meta)))
	out = binary.LittleEndian.AppendUint16(out, 1) // metadata, last extension
	out = append(out, b.meta...)
	return append(out, b.data...)
}

// Time formats t as chrono's to_rfc3339_opts(SecondsFormat::AutoSi, z):
// no fraction when the nanoseconds are 0, else 3, 6 or 9 digits, the
// fewest that are exact; "Z" with z, else "+00:00".
func Time(t time.Time, z bool) string {
	t = t.UTC()
	s := t.Format("2006-01-02T15:04:05")
	ns := t.Nanosecond()
	switch {
	case ns == 0:
	case ns%1_000_000 == 0:
		s += fmt.Sprintf(".%03d", ns/1_000_000)
	case ns%1_000 == 0:
		s += fmt.Sprintf(".%06d", ns/1_000)
	default:
		s += fmt.Sprintf(".%09d", ns)
	}
	if z {
		return s + "Z"
	}
	return s + "+00:00"
}

// Encode returns the bytes the exporter hands the kernel for one span
// after the 4-byte write index: the 8-byte eventheader (flags 0x07:
// pointer64, little endian, extension; version, id, tag and opcode 0;
// level 4), the metadata extension's header (its size, kind 1 without the
// chain flag), the metadata, the data. This is what a BPF program sees
// after the record's 8 bytes of common fields.
func (x *Exporter) Encode(s *Span) ([]byte, error) {
	b := NewBuilder("Span")
	// __csver__: an untyped Rust integer literal is an i32: Value32.
	b.U32("__csver__", 1024, fmtUnsigned)

	z := x.Version != Rust050
	partA := b.Struct("PartA", 3)
	countA := byte(3)
	b.Str("time", Time(s.End, z))
	b.Str("ext_dt_traceId", hex.EncodeToString(s.TraceID[:]))
	b.Str("ext_dt_spanId", hex.EncodeToString(s.SpanID[:]))
	if x.CloudRole != "" {
		countA++
		b.Str("ext_cloud_role", x.CloudRole)
	}
	if x.CloudRoleInstance != "" {
		countA++
		b.Str("ext_cloud_roleInstance", x.CloudRoleInstance)
	}
	b.SetCount(partA, countA)

	partB := b.Struct("PartB", 5)
	b.Str("_typeName", "Span")
	b.Str("name", s.Name)
	b.Str("startTime", Time(s.Start, z))
	b.Bool("success", s.Status == StatusOK || s.Status == StatusUnset)
	// kind: the match arms are untyped integer literals, so an i32.
	b.U32("kind", uint32(s.Kind), fmtUnsigned)
	countB := 5
	if s.ParentID != ([8]byte{}) {
		countB++
		b.Str("parentId", hex.EncodeToString(s.ParentID[:]))
	}
	if z && len(s.Links) > 0 {
		countB++
		var j strings.Builder
		j.WriteByte('[')
		for i, l := range s.Links {
			if i > 0 {
				j.WriteByte(',')
			}
			fmt.Fprintf(&j, `{"toTraceId":"%x","toSpanId":"%x"}`, l.TraceID, l.SpanID)
		}
		j.WriteByte(']')
		b.Str("links", j.String())
	}
	wk := x.Version.wellKnown()
	partC := 0
	hasStatusCode := false
	for _, kv := range s.Attributes {
		if name, ok := wk[kv.Key]; ok {
			hasStatusCode = hasStatusCode || name == "httpStatusCode"
			b.Attribute(name, kv.Value)
			countB++
		} else {
			partC++
		}
	}
	if z && s.Status == StatusError && s.StatusDesc != "" && !hasStatusCode {
		countB++
		b.Str("statusMessage", s.StatusDesc)
	}
	b.SetCount(partB, byte(countB))
	if partC > 0 {
		b.Struct("PartC", byte(partC))
		for _, kv := range s.Attributes {
			if _, ok := wk[kv.Key]; !ok {
				b.Attribute(kv.Key, kv.Value)
			}
		}
	}
	if len(b.meta)+len(b.data) > 65535-(52+16) {
		return nil, ErrTooLarge
	}
	return b.Payload(), nil
}
