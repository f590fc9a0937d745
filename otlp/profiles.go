package otlp

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"

	"google.golang.org/protobuf/encoding/protowire"

	"github.com/spanwatch/spanwatch/snapshot"
)

// The profiles signal is OTLP's v1development profiles, as the
// OpenTelemetry Collector's OTLP receiver (v0.165.0, pdata v1.71.0)
// decodes it: opentelemetry/proto/collector/profiles/v1development,
// profiles development version 1, POST ENDPOINT/v1development/profiles
// with a protobuf body and the otlp-profiles-development-version header.
// The messages are written here with protowire, field by field, rather
// than with generated types: the schema is still changing, and the few
// messages spanwatch fills are smaller written out than a dependency
// pinned to one revision of it.
const (
	profilesPath = "/v1development/profiles"
	// profilesVersionHeader and profilesVersion say which development
	// version of the schema the body is; a receiver refuses one it does
	// not know rather than misread it.
	profilesVersionHeader = "otlp-profiles-development-version"
	profilesVersion       = "1"
)

// Field numbers of the v1development messages spanwatch writes.
const (
	// ExportProfilesServiceRequest.
	reqResourceProfiles, reqDictionary = 1, 2
	// ProfilesDictionary.
	dictLocation, dictFunction, dictLink, dictString, dictAttribute, dictStack = 2, 3, 4, 5, 6, 7
	// ResourceProfiles, ScopeProfiles, Resource, InstrumentationScope.
	rpResource, rpScopeProfiles = 1, 2
	spScope, spProfiles         = 1, 2
	resAttributes               = 1
	scopeName                   = 1
	// Profile.
	profSampleType, profSamples, profTime, profDuration, profID = 1, 2, 3, 4, 7
	// Sample.
	sampleStack, sampleAttributes, sampleLink, sampleValues, sampleTimestamps = 1, 2, 3, 4, 5
	// Stack, Location, Line, Function, Link, ValueType, KeyValueAndUnit.
	stackLocations                = 1
	locAddress, locLines          = 2, 3
	lineFunction, lineLine        = 1, 2
	fnName, fnSystemName, fnFile  = 1, 2, 3
	linkTraceID, linkSpanID       = 1, 2
	vtType, vtUnit                = 1, 2
	kvuKey, kvuValue              = 1, 2
	kvKey, kvValue                = 1, 2
	anyString, anyBool, anyInt    = 1, 2, 3
	respPartialSuccess, psRejects = 1, 1
)

// SampleType and SampleUnit are the sample type of the profiles an
// Exporter sends: one sample an overrun, value 1, on the stack the span
// ended on (or stood on, still running). The span's duration is the
// sample's spanwatch.duration_ns attribute, not its value: weighing the
// end stack by the whole duration would blame it for time spent
// elsewhere in the span.
const (
	SampleType = "spans"
	SampleUnit = "count"
)

// sample is what a profile needs of one overrun, taken when it is
// queued: its time, the ids of its trace and span, and its stack, leaf
// first (kernel frames above the user frames, as they ran).
type sample struct {
	timeNs  uint64
	traceID []byte // 16 bytes, or nil
	spanID  []byte // 8 bytes, or nil
	frames  []snapshot.Frame
}

func newSample(o *snapshot.Overrun, r *record) *sample {
	s := &sample{}
	s.timeNs, _ = strconv.ParseUint(r.TimeUnixNano, 10, 64)
	if r.TraceID != "" {
		s.traceID, _ = hex.DecodeString(r.TraceID)
		s.spanID, _ = hex.DecodeString(r.SpanID) // nil without a span id
	}
	s.frames = make([]snapshot.Frame, 0, len(o.KernelStack)+len(o.UserStack))
	s.frames = append(append(s.frames, o.KernelStack...), o.UserStack...)
	return s
}

// dictionary builds a ProfilesDictionary: every table starts with its
// zero entry, as the format requires, and holds each string, function,
// location, stack, link and attribute once.
type dictionary struct {
	strings    []string
	stringIdx  map[string]int32
	functions  [][]byte
	funcIdx    map[[2]int32]int32
	locations  [][]byte
	locIdx     map[snapshot.Frame]int32
	inlinedIdx map[string]int32 // locations of inlined runs, by fmt.Sprint(run)
	stacks     [][]byte
	stackIdx   map[string]int32
	links      [][]byte
	linkIdx    map[string]int32
	attributes [][]byte
	attrIdx    map[string]int32
}

func newDictionary() *dictionary {
	return &dictionary{
		strings: []string{""}, stringIdx: map[string]int32{"": 0},
		functions: [][]byte{nil}, funcIdx: map[[2]int32]int32{},
		locations: [][]byte{nil}, locIdx: map[snapshot.Frame]int32{}, inlinedIdx: map[string]int32{},
		stacks: [][]byte{nil}, stackIdx: map[string]int32{},
		links: [][]byte{nil}, linkIdx: map[string]int32{},
		attributes: [][]byte{nil}, attrIdx: map[string]int32{},
	}
}

func (d *dictionary) str(s string) int32 {
	if i, ok := d.stringIdx[s]; ok {
		return i
	}
	i := int32(len(d.strings))
	d.strings = append(d.strings, s)
	d.stringIdx[s] = i
	return i
}

func (d *dictionary) function(f snapshot.Frame) int32 {
	name := f.Function
	if name == "" {
		name = f.String() // module+0xoffset, or the address
	}
	k := [2]int32{d.str(name), d.str(f.File)}
	if i, ok := d.funcIdx[k]; ok {
		return i
	}
	var b []byte
	b = appendVarint(b, fnName, uint64(k[0]))
	b = appendVarint(b, fnSystemName, uint64(k[0]))
	b = appendVarint(b, fnFile, uint64(k[1]))
	i := int32(len(d.functions))
	d.functions = append(d.functions, b)
	d.funcIdx[k] = i
	return i
}

// location returns the location of run: one frame, or frames inlined
// into the last one, which share its address: one location with a line
// each, innermost first, as OTLP (and pprof) represent inlining.
func (d *dictionary) location(run []snapshot.Frame) int32 {
	var inlined string
	if len(run) == 1 {
		if i, ok := d.locIdx[run[0]]; ok {
			return i
		}
	} else {
		inlined = fmt.Sprint(run)
		if i, ok := d.inlinedIdx[inlined]; ok {
			return i
		}
	}
	var b []byte
	b = appendVarint(b, locAddress, run[len(run)-1].Addr)
	for _, f := range run {
		var line []byte
		line = appendVarint(line, lineFunction, uint64(d.function(f)))
		line = appendVarint(line, lineLine, uint64(f.Line))
		b = appendBytes(b, locLines, line)
	}
	i := int32(len(d.locations))
	d.locations = append(d.locations, b)
	if len(run) == 1 {
		d.locIdx[run[0]] = i
	} else {
		d.inlinedIdx[inlined] = i
	}
	return i
}

// stack returns the stack of frames, leaf first; 0, the empty stack,
// when there are none (the record's spanwatch.stack_error says why).
func (d *dictionary) stack(frames []snapshot.Frame) int32 {
	if len(frames) == 0 {
		return 0
	}
	var locs []byte
	for i := 0; i < len(frames); {
		j := i
		for j < len(frames)-1 && frames[j].Inlined {
			j++
		}
		locs = protowire.AppendVarint(locs, uint64(d.location(frames[i:j+1])))
		i = j + 1
	}
	if i, ok := d.stackIdx[string(locs)]; ok {
		return i
	}
	b := appendBytes(nil, stackLocations, locs)
	i := int32(len(d.stacks))
	d.stacks = append(d.stacks, b)
	d.stackIdx[string(locs)] = i
	return i
}

func (d *dictionary) link(traceID, spanID []byte) int32 {
	if traceID == nil {
		return 0
	}
	k := string(traceID) + string(spanID)
	if i, ok := d.linkIdx[k]; ok {
		return i
	}
	var b []byte
	b = appendBytes(b, linkTraceID, traceID)
	b = appendBytes(b, linkSpanID, spanID)
	i := int32(len(d.links))
	d.links = append(d.links, b)
	d.linkIdx[k] = i
	return i
}

func (d *dictionary) attribute(a attr) int32 {
	var b []byte
	b = appendVarint(b, kvuKey, uint64(d.str(a.Key)))
	b = protowire.AppendTag(b, kvuValue, protowire.BytesType)
	b = protowire.AppendBytes(b, anyValue(a.Value))
	if i, ok := d.attrIdx[string(b)]; ok {
		return i
	}
	i := int32(len(d.attributes))
	d.attributes = append(d.attributes, b)
	d.attrIdx[string(b)] = i
	return i
}

func (d *dictionary) encode() []byte {
	var b []byte
	for _, t := range []struct {
		field   protowire.Number
		entries [][]byte
	}{{dictLocation, d.locations}, {dictFunction, d.functions}, {dictLink, d.links}} {
		for _, e := range t.entries {
			b = appendBytes(b, t.field, e)
		}
	}
	for _, s := range d.strings {
		b = protowire.AppendTag(b, dictString, protowire.BytesType)
		b = protowire.AppendString(b, s)
	}
	for _, t := range []struct {
		field   protowire.Number
		entries [][]byte
	}{{dictAttribute, d.attributes}, {dictStack, d.stacks}} {
		for _, e := range t.entries {
			b = appendBytes(b, t.field, e)
		}
	}
	return b
}

// anyValue encodes an attribute's value as an AnyValue.
func anyValue(v value) []byte {
	var b []byte
	switch {
	case v.StringValue != nil:
		b = protowire.AppendTag(b, anyString, protowire.BytesType)
		b = protowire.AppendString(b, *v.StringValue)
	case v.IntValue != nil:
		n, _ := strconv.ParseInt(*v.IntValue, 10, 64)
		b = appendVarint(b, anyInt, uint64(n))
	case v.BoolValue != nil:
		b = appendVarint(b, anyBool, protowire.EncodeBool(*v.BoolValue))
	}
	return b
}

// profilesRequest encodes a batch as one ExportProfilesServiceRequest:
// the exporter's resource, scope spanwatch, and one profile with a
// sample an overrun, carrying its record's attributes and a link to its
// trace and span.
func (e *Exporter) profilesRequest(batch []item) []byte {
	d := newDictionary()
	var samples []byte
	var start, end uint64
	for _, it := range batch {
		s := it.sample
		if start == 0 || s.timeNs < start {
			start = s.timeNs
		}
		end = max(end, s.timeNs)
		var attrs []byte
		for _, a := range it.rec.Attributes {
			attrs = protowire.AppendVarint(attrs, uint64(d.attribute(a)))
		}
		var sb []byte
		sb = appendVarint(sb, sampleStack, uint64(d.stack(s.frames)))
		sb = appendBytes(sb, sampleAttributes, attrs)
		if l := d.link(s.traceID, s.spanID); l != 0 {
			sb = appendVarint(sb, sampleLink, uint64(l))
		}
		sb = appendBytes(sb, sampleValues, protowire.AppendVarint(nil, 1))
		sb = appendBytes(sb, sampleTimestamps, protowire.AppendFixed64(nil, s.timeNs))
		samples = appendBytes(samples, profSamples, sb)
	}
	var vt []byte
	vt = appendVarint(vt, vtType, uint64(d.str(SampleType)))
	vt = appendVarint(vt, vtUnit, uint64(d.str(SampleUnit)))
	id := make([]byte, 16)
	rand.Read(id)
	var prof []byte
	prof = appendBytes(prof, profSampleType, vt)
	prof = append(prof, samples...)
	prof = protowire.AppendTag(prof, profTime, protowire.Fixed64Type)
	prof = protowire.AppendFixed64(prof, start)
	prof = appendVarint(prof, profDuration, end-start)
	prof = appendBytes(prof, profID, id)

	var res []byte
	for _, a := range e.resource {
		var kv []byte
		kv = protowire.AppendTag(kv, kvKey, protowire.BytesType)
		kv = protowire.AppendString(kv, a.Key)
		kv = appendBytes(kv, kvValue, anyValue(a.Value))
		res = appendBytes(res, resAttributes, kv)
	}
	var scope []byte
	scope = protowire.AppendTag(scope, scopeName, protowire.BytesType)
	scope = protowire.AppendString(scope, "spanwatch")
	var sp []byte
	sp = appendBytes(sp, spScope, scope)
	sp = appendBytes(sp, spProfiles, prof)
	var rp []byte
	rp = appendBytes(rp, rpResource, res)
	rp = appendBytes(rp, rpScopeProfiles, sp)

	var b []byte
	b = appendBytes(b, reqResourceProfiles, rp)
	b = appendBytes(b, reqDictionary, d.encode())
	return b
}

// profilesRejected reads an ExportProfilesServiceResponse: the profiles
// its partial success rejected (0 when it has none).
func profilesRejected(body []byte) (uint64, error) {
	ps, err := field(body, respPartialSuccess, protowire.BytesType)
	if err != nil || ps == nil {
		return 0, err
	}
	v, err := field(ps, psRejects, protowire.VarintType)
	if err != nil || v == nil {
		return 0, err
	}
	n, _ := protowire.ConsumeVarint(v)
	return n, nil
}

// field returns the last occurrence of field num in the message b: a
// length-delimited field's contents, or a varint's encoding.
func field(b []byte, num protowire.Number, typ protowire.Type) ([]byte, error) {
	var out []byte
	for len(b) > 0 {
		n, t, l := protowire.ConsumeTag(b)
		if l < 0 {
			return nil, errors.New("bad protobuf response")
		}
		b = b[l:]
		m := protowire.ConsumeFieldValue(n, t, b)
		if m < 0 {
			return nil, errors.New("bad protobuf response")
		}
		if n == num && t == typ {
			out = b[:m]
			if t == protowire.BytesType {
				out, _ = protowire.ConsumeBytes(b[:m])
			}
		}
		b = b[m:]
	}
	return out, nil
}

func appendVarint(b []byte, num protowire.Number, v uint64) []byte {
	b = protowire.AppendTag(b, num, protowire.VarintType)
	return protowire.AppendVarint(b, v)
}

func appendBytes(b []byte, num protowire.Number, v []byte) []byte {
	b = protowire.AppendTag(b, num, protowire.BytesType)
	return protowire.AppendBytes(b, v)
}
