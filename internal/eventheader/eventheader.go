package eventheader

import (
	"fmt"
	"strconv"
	"strings"
)

// CommandTypes is the format every EventHeader tracepoint is registered
// with, after its name: the fields of struct eventheader.
const CommandTypes = "u8 eventheader_flags; u8 version; u16 id; u16 tag; u8 opcode; u8 level"

// HeaderSize is the size of struct eventheader.
const HeaderSize = 8

// Header flags (eventheader_flags).
const (
	FlagPointer64    = 0x01
	FlagLittleEndian = 0x02
	FlagExtension    = 0x04
)

// Extension kinds (eventheader_extension_kind).
const (
	ExtKindMask     = 0x7fff
	ExtChainFlag    = 0x8000
	ExtMetadata     = 1
	ExtActivityID   = 2
	extensionHeader = 4 // u16 size, u16 kind
)

// Field encodings (event_field_encoding): the low 5 bits, and 3 flags.
const (
	EncValueMask  = 0x1f
	EncCArrayFlag = 0x20
	EncVArrayFlag = 0x40
	EncChainFlag  = 0x80

	EncInvalid              = 0
	EncStruct               = 1
	EncValue8               = 2
	EncValue16              = 3
	EncValue32              = 4
	EncValue64              = 5
	EncValue128             = 6
	EncZStringChar8         = 7
	EncZStringChar16        = 8
	EncZStringChar32        = 9
	EncStringLength16Char8  = 10
	EncStringLength16Char16 = 11
	EncStringLength16Char32 = 12
	EncBinaryLength16Char8  = 13
	encMax                  = 14
)

// Field formats (event_field_format): the low 7 bits, and a flag.
const (
	FormatValueMask = 0x7f
	FormatChainFlag = 0x80

	FormatDefault     = 0
	FormatUnsignedInt = 1
	FormatSignedInt   = 2
	FormatHexInt      = 3
	FormatBoolean     = 7
	FormatFloat       = 8
	FormatString8     = 10
	FormatStringUTF   = 11
)

// Levels (event_level).
const (
	LevelCritical    = 1
	LevelError       = 2
	LevelWarning     = 3
	LevelInformation = 4
	LevelVerbose     = 5
)

// NameMax is EVENTHEADER_NAME_MAX: tracepoint names are shorter.
const NameMax = 256

// A Tracepoint is an EventHeader tracepoint name taken apart:
// PROVIDER_L<level>K<keyword><options>, level and keyword in lowercase hex.
type Tracepoint struct {
	Provider string
	Level    uint8
	Keyword  uint64
	// Options are the attributes after the keyword: uppercase letters each
	// followed by digits and lowercase letters ("Gmygroup").
	Options string
}

func (t Tracepoint) String() string {
	return fmt.Sprintf("%s_L%xK%x%s", t.Provider, t.Level, t.Keyword, t.Options)
}

// ParseTracepoint takes an EventHeader tracepoint name apart. It reports
// false for a name that does not follow the convention.
func ParseTracepoint(name string) (Tracepoint, bool) {
	var t Tracepoint
	if len(name) >= NameMax {
		return t, false
	}
	// The provider may contain '_': find the last "_L<hex>K<hex>" that
	// runs to the end of the name or to the options.
	for i := strings.LastIndex(name, "_L"); i > 0; i = strings.LastIndex(name[:i], "_L") {
		rest := name[i+2:]
		lv, n := hexPrefix(rest)
		if n == 0 || n > 2 || n < len(rest) && rest[n] != 'K' || n == len(rest) {
			continue
		}
		rest = rest[n+1:]
		kw, m := hexPrefix(rest)
		if m == 0 || m > 16 {
			continue
		}
		opts := rest[m:]
		if !validOptions(opts) {
			continue
		}
		lvl, _ := strconv.ParseUint(lv, 16, 8)
		key, _ := strconv.ParseUint(kw, 16, 64)
		if lvl == 0 {
			continue
		}
		return Tracepoint{Provider: name[:i], Level: uint8(lvl), Keyword: key, Options: opts}, true
	}
	return t, false
}

// hexPrefix returns the lowercase hex digits s starts with.
func hexPrefix(s string) (string, int) {
	n := 0
	for n < len(s) && (s[n] >= '0' && s[n] <= '9' || s[n] >= 'a' && s[n] <= 'f') {
		n++
	}
	return s[:n], n
}

func validOptions(s string) bool {
	for i := 0; i < len(s); {
		if s[i] < 'A' || s[i] > 'Z' {
			return false
		}
		i++
		for i < len(s) && (s[i] >= '0' && s[i] <= '9' || s[i] >= 'a' && s[i] <= 'z') {
			i++
		}
	}
	return true
}

// headerFields are the kernel's fields of an EventHeader tracepoint, as
// its format file lists them after the common fields.
var headerFields = []struct {
	name, typ string
	offset    int
}{
	{"eventheader_flags", "u8", 8}, {"version", "u8", 9}, {"id", "u16", 10},
	{"tag", "u16", 12}, {"opcode", "u8", 14}, {"level", "u8", 15},
}

// CheckFormat reports whether a tracepoint's fields (name, type and
// offset, as internal/tracefs parses them from its format file) are the
// EventHeader ones, and if not, why.
func CheckFormat(names, types []string, offsets []int) error {
	if len(names) != len(headerFields) {
		return fmt.Errorf("has %d fields, an EventHeader tracepoint has %d (%s)", len(names), len(headerFields), CommandTypes)
	}
	for i, h := range headerFields {
		if names[i] != h.name || types[i] != h.typ || offsets[i] != h.offset {
			return fmt.Errorf("field %d is %s %s at offset %d, an EventHeader tracepoint has %s %s at %d", i, types[i], names[i], offsets[i], h.typ, h.name, h.offset)
		}
	}
	return nil
}
