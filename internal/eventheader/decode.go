package eventheader

import (
	"encoding/binary"
	"fmt"
	"strings"
)

// The BPF decoder's limits (bpf/eventheader.h): the reference decoder
// walks with the same ones, so both refuse the same events.
const (
	// BufSize is how much of a payload the BPF decoder copies and walks.
	BufSize = 8192
	// MaxFields is how many field definitions it walks.
	MaxFields = 64
	// MaxDepth is the deepest struct nesting.
	MaxDepth = 4
	// MaxNameLen is the longest event or field name, in bytes.
	MaxNameLen = 255
	// MaxExtensions is how many extension blocks it walks.
	MaxExtensions = 4
	// MaxElements is how many elements of an array of counted strings it
	// walks (arrays of zero-terminated strings are not walked at all).
	MaxElements = 64
	// MaxWant is how many fields one event mapping can ask for.
	MaxWant = 12
)

// A Reason says why an event was not turned into a span. The values match
// enum eh_reason in bpf/eventheader.h, which counts them per reason.
type Reason uint32

const (
	OK                     Reason = iota
	ReasonShort                   // payload shorter than the 8-byte header
	ReasonByteOrder               // big-endian event: not decoded
	ReasonNoMetadata              // no metadata extension: fields have no names
	ReasonBadExtension            // an extension block runs past the payload, or too many
	ReasonTruncatedMeta           // the metadata ends inside a name or a field definition
	ReasonTruncatedData           // the data ends inside a field's value
	ReasonBadStruct               // a struct with no members, nested too deep, or whose member count runs past the metadata
	ReasonUnsupported             // an encoding the decoder cannot size (invalid, array of structs)
	ReasonTooLarge                // past a walk limit: BufSize, MaxFields, MaxNameLen, MaxElements
	ReasonMissingField            // a field the mapping needs is not in the event
	ReasonFieldType               // a needed field has an encoding that cannot give its value
	ReasonBadTime                 // a time that is not RFC 3339
	ReasonNegativeDuration        // the span ends before it starts
	ReasonBadID                   // a trace or span id that is not hex of the right length
	ReasonOtherEvent              // an event no source maps (not an error)
	ReasonUnpaired                // the end of a pair without its start
	NumReasons
)

var reasonNames = [...]string{
	OK: "ok", ReasonShort: "short", ReasonByteOrder: "big_endian", ReasonNoMetadata: "no_metadata",
	ReasonBadExtension: "bad_extension", ReasonTruncatedMeta: "truncated_metadata",
	ReasonTruncatedData: "truncated_data", ReasonBadStruct: "bad_struct",
	ReasonUnsupported: "unsupported_encoding", ReasonTooLarge: "too_large",
	ReasonMissingField: "missing_field", ReasonFieldType: "field_type", ReasonBadTime: "bad_time",
	ReasonNegativeDuration: "negative_duration", ReasonBadID: "bad_id",
	ReasonOtherEvent: "other_event", ReasonUnpaired: "unpaired_end",
}

func (r Reason) String() string {
	if int(r) < len(reasonNames) {
		return reasonNames[r]
	}
	return fmt.Sprintf("reason(%d)", uint32(r))
}

// A Header is struct eventheader.
type Header struct {
	Flags   uint8
	Version uint8
	ID      uint16
	Tag     uint16
	Opcode  uint8
	Level   uint8
}

// A Field is one field the walker passed: where its value is in the
// payload and how it is encoded.
type Field struct {
	Path     []string
	Hash     uint64 // Path's hash (PathHash)
	Encoding uint8  // with its flags
	Format   uint8  // with its flag
	Tag      uint16
	ArrayLen uint16 // constant array length (EncCArrayFlag)
	// Offset and Size are the value's bytes in the payload, including a
	// counted string's length or a variable array's count.
	Offset, Size int
}

// Base is the field's encoding without flags.
func (f *Field) Base() uint8 { return f.Encoding & EncValueMask }

// IsArray reports whether the field is a constant or variable array.
func (f *Field) IsArray() bool { return f.Encoding&(EncCArrayFlag|EncVArrayFlag) != 0 }

// An Event is what the walker found in an event.
type Event struct {
	Header     Header
	Name       string // the event name, with any ";attribute=value" suffixes
	NameHash   uint64
	ActivityID []byte // 16 bytes, or nil
	RelatedID  []byte // 16 bytes, or nil
	// Fields are the fields walked, in order (struct fields included).
	Fields []Field
	// Found[i] is the index in Fields of the field wanted as i, or -1.
	Found []int
}

// Decode walks an EventHeader payload (the bytes after the kernel's
// common fields) as the BPF decoder does. want is called with the event's
// name hash once the name is known and returns the path hashes of the
// fields to find, or nil to skip the event (ReasonOtherEvent). The walk
// stops when every wanted field is found; with an empty, non-nil want it
// walks every field. A Reason other than OK says why the event cannot be
// used; the Event holds what was found until then.
func Decode(p []byte, want func(nameHash uint64) []uint64) (*Event, Reason) {
	w := walker{p: p, n: min(len(p), BufSize), clipped: len(p) > BufSize}
	ev := &Event{}
	r := w.walk(ev, want)
	return ev, r
}

type walker struct {
	p       []byte
	n       int  // bytes the BPF decoder would have: min(len(p), BufSize)
	clipped bool // len(p) > BufSize
}

// short returns the reason for a read past the end of what is available:
// ReasonTooLarge when the payload was longer than the decoder's buffer,
// else r.
func (w *walker) short(r Reason) Reason {
	if w.clipped {
		return ReasonTooLarge
	}
	return r
}

func (w *walker) u16(at int) uint16 { return binary.LittleEndian.Uint16(w.p[at:]) }

// name scans a NUL-terminated name at pos, before end.
func (w *walker) name(pos, end int) (string, int, Reason) {
	for i := pos; i < end && i-pos <= MaxNameLen; i++ {
		if w.p[i] == 0 {
			return string(w.p[pos:i]), i + 1, OK
		}
	}
	if end-pos > MaxNameLen {
		return "", 0, ReasonTooLarge
	}
	return "", 0, ReasonTruncatedMeta
}

func (w *walker) walk(ev *Event, want func(uint64) []uint64) Reason {
	if len(w.p) < HeaderSize {
		return ReasonShort
	}
	p := w.p
	ev.Header = Header{Flags: p[0], Version: p[1], ID: w.u16(2), Tag: w.u16(4), Opcode: p[6], Level: p[7]}
	if ev.Header.Flags&FlagLittleEndian == 0 {
		return ReasonByteOrder
	}
	if ev.Header.Flags&FlagExtension == 0 {
		return ReasonNoMetadata
	}
	pos := HeaderSize
	metaStart, metaEnd := -1, -1
	for i := 0; ; i++ {
		if i == MaxExtensions {
			return ReasonBadExtension
		}
		if pos+extensionHeader > w.n {
			return w.short(ReasonBadExtension)
		}
		size, kind := int(w.u16(pos)), w.u16(pos+2)
		body := pos + extensionHeader
		end := body + size
		switch kind & ExtKindMask {
		case ExtMetadata:
			if end > w.n {
				return w.short(ReasonTruncatedMeta)
			}
			metaStart, metaEnd = body, end
		case ExtActivityID:
			if end > w.n {
				return w.short(ReasonBadExtension)
			}
			if size != 16 && size != 32 {
				return ReasonBadExtension
			}
			ev.ActivityID = p[body : body+16]
			if size == 32 {
				ev.RelatedID = p[body+16 : body+32]
			}
		default:
			if end > w.n {
				return w.short(ReasonBadExtension)
			}
		}
		pos = end
		if kind&ExtChainFlag == 0 {
			break
		}
	}
	if metaStart < 0 {
		return ReasonNoMetadata
	}
	dpos := pos
	name, mpos, r := w.name(metaStart, metaEnd)
	if r != OK {
		return r
	}
	ev.Name = name
	ev.NameHash = NameHash(name)
	wanted := want(ev.NameHash)
	if wanted == nil {
		return ReasonOtherEvent
	}
	if len(wanted) > MaxWant {
		wanted = wanted[:MaxWant]
	}
	ev.Found = make([]int, len(wanted))
	for i := range ev.Found {
		ev.Found[i] = -1
	}
	found := 0
	depth := 0
	var remaining [MaxDepth + 1]int
	var hashes [MaxDepth + 1]uint64
	var names [MaxDepth + 1]string
	for f := 0; f < MaxFields; f++ {
		if len(wanted) > 0 && found == len(wanted) {
			return OK
		}
		if mpos >= metaEnd {
			if depth > 0 {
				return ReasonBadStruct
			}
			if found < len(wanted) {
				return ReasonMissingField
			}
			return OK
		}
		fname, next, r := w.name(mpos, metaEnd)
		if r != OK {
			return r
		}
		mpos = next
		if mpos >= metaEnd {
			return ReasonTruncatedMeta
		}
		fld := Field{Encoding: p[mpos]}
		mpos++
		if fld.Encoding&EncChainFlag != 0 {
			if mpos >= metaEnd {
				return ReasonTruncatedMeta
			}
			fld.Format = p[mpos]
			mpos++
			if fld.Format&FormatChainFlag != 0 {
				if mpos+2 > metaEnd {
					return ReasonTruncatedMeta
				}
				fld.Tag = w.u16(mpos)
				mpos += 2
			}
		}
		if fld.Encoding&EncCArrayFlag != 0 && fld.Encoding&EncVArrayFlag != 0 {
			return ReasonUnsupported
		}
		if fld.Encoding&EncCArrayFlag != 0 {
			if mpos+2 > metaEnd {
				return ReasonTruncatedMeta
			}
			fld.ArrayLen = w.u16(mpos)
			mpos += 2
			if fld.ArrayLen == 0 {
				return ReasonUnsupported
			}
		}
		fld.Hash = PathHash(hashes[depth], NameHash(fname))
		fld.Path = append(append([]string(nil), names[1:depth+1]...), fname)
		base := fld.Base()
		if base == EncStruct {
			if fld.IsArray() {
				return ReasonUnsupported
			}
			cnt := int(fld.Format & FormatValueMask)
			if cnt == 0 || depth == MaxDepth {
				return ReasonBadStruct
			}
			fld.Offset = dpos
			ev.Fields = append(ev.Fields, fld)
			depth++
			remaining[depth], hashes[depth], names[depth] = cnt, fld.Hash, fname
			continue
		}
		if base == EncInvalid || base >= encMax {
			return ReasonUnsupported
		}
		start := dpos
		count := 1
		if fld.Encoding&EncVArrayFlag != 0 {
			if dpos+2 > w.n {
				return w.short(ReasonTruncatedData)
			}
			count = int(w.u16(dpos))
			dpos += 2
		} else if fld.Encoding&EncCArrayFlag != 0 {
			count = int(fld.ArrayLen)
		}
		if size := fixedSize(base); size > 0 {
			if dpos+count*size > w.n {
				return w.short(ReasonTruncatedData)
			}
			dpos += count * size
		} else {
			// Arrays of zero-terminated strings are not walked.
			if base >= EncZStringChar8 && base <= EncZStringChar32 && fld.IsArray() {
				return ReasonUnsupported
			}
			if count > MaxElements {
				return ReasonTooLarge
			}
			for e := 0; e < count; e++ {
				end, r := w.varSize(base, dpos)
				if r != OK {
					return r
				}
				dpos = end
			}
		}
		fld.Offset, fld.Size = start, dpos-start
		ev.Fields = append(ev.Fields, fld)
		for k, h := range wanted {
			if h == fld.Hash && ev.Found[k] < 0 {
				ev.Found[k] = len(ev.Fields) - 1
				found++
			}
		}
		// The field is one member done; a struct whose members are all
		// done is one member of its parent done.
		for depth > 0 {
			remaining[depth]--
			if remaining[depth] > 0 {
				break
			}
			depth--
		}
	}
	if len(wanted) > 0 && found == len(wanted) {
		return OK
	}
	if mpos >= metaEnd && depth == 0 {
		if found < len(wanted) {
			return ReasonMissingField
		}
		return OK
	}
	return ReasonTooLarge
}

// fixedSize is the size of a value of a fixed-size encoding, 0 for the
// variable ones.
func fixedSize(base uint8) int {
	switch base {
	case EncValue8:
		return 1
	case EncValue16:
		return 2
	case EncValue32:
		return 4
	case EncValue64:
		return 8
	case EncValue128:
		return 16
	}
	return 0
}

// varSize returns where a variable-size value at pos ends.
func (w *walker) varSize(base uint8, pos int) (int, Reason) {
	switch base {
	case EncZStringChar8, EncZStringChar16, EncZStringChar32:
		unit := 1 << (base - EncZStringChar8) // 1, 2, 4
		for i := pos; i+unit <= w.n; i += unit {
			zero := true
			for j := 0; j < unit; j++ {
				zero = zero && w.p[i+j] == 0
			}
			if zero {
				return i + unit, OK
			}
		}
		return 0, w.short(ReasonTruncatedData)
	case EncStringLength16Char8, EncStringLength16Char16, EncStringLength16Char32, EncBinaryLength16Char8:
		unit := 1
		switch base {
		case EncStringLength16Char16:
			unit = 2
		case EncStringLength16Char32:
			unit = 4
		}
		if pos+2 > w.n {
			return 0, w.short(ReasonTruncatedData)
		}
		end := pos + 2 + int(w.u16(pos))*unit
		if end > w.n {
			return 0, w.short(ReasonTruncatedData)
		}
		return end, OK
	}
	return 0, ReasonUnsupported
}

// String returns the value of a char8 string field (counted or
// NUL-terminated; binary counted fields too), without its terminator.
func (ev *Event) String(p []byte, k int) ([]byte, Reason) {
	if ev.Found[k] < 0 {
		return nil, ReasonMissingField
	}
	f := &ev.Fields[ev.Found[k]]
	if f.IsArray() {
		return nil, ReasonFieldType
	}
	switch f.Base() {
	case EncStringLength16Char8, EncBinaryLength16Char8:
		return p[f.Offset+2 : f.Offset+f.Size], OK
	case EncZStringChar8:
		return p[f.Offset : f.Offset+f.Size-1], OK
	}
	return nil, ReasonFieldType
}

// Uint returns the value of an integer field of 1, 2, 4 or 8 bytes,
// sign-extended when its format is signed_int.
func (ev *Event) Uint(p []byte, k int) (uint64, Reason) {
	if ev.Found[k] < 0 {
		return 0, ReasonMissingField
	}
	f := &ev.Fields[ev.Found[k]]
	if f.IsArray() {
		return 0, ReasonFieldType
	}
	signed := f.Format&FormatValueMask == FormatSignedInt
	b := p[f.Offset:]
	switch f.Base() {
	case EncValue8:
		if signed {
			return uint64(int64(int8(b[0]))), OK
		}
		return uint64(b[0]), OK
	case EncValue16:
		v := binary.LittleEndian.Uint16(b)
		if signed {
			return uint64(int64(int16(v))), OK
		}
		return uint64(v), OK
	case EncValue32:
		v := binary.LittleEndian.Uint32(b)
		if signed {
			return uint64(int64(int32(v))), OK
		}
		return uint64(v), OK
	case EncValue64:
		return binary.LittleEndian.Uint64(b), OK
	}
	return 0, ReasonFieldType
}

// PathString joins a field's path with dots, for messages.
func (f *Field) PathString() string { return strings.Join(f.Path, ".") }
