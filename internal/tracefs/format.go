package tracefs

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// A FieldKind says how a BPF program reads a field.
type FieldKind uint8

const (
	// KindInt is an integer of 1, 2, 4 or 8 bytes (Field.Signed tells
	// how to widen it).
	KindInt FieldKind = iota + 1
	// KindChars is a fixed char array (char name[N], unsigned char
	// name[N]): a string of at most N bytes, NUL-terminated or not.
	KindChars
	// KindDataLoc is a __data_loc array: a u32 whose low 16 bits are the
	// data's offset from the start of the record (the common fields
	// included) and whose high 16 bits are its length.
	KindDataLoc
	// KindRelLoc is a __rel_loc array (kernel 5.19+): like KindDataLoc,
	// but the offset counts from the end of the 4-byte field itself.
	KindRelLoc
	// KindOther is anything else (a struct, a pointer, an array of
	// integers): it can be skipped but not read as a value or a string.
	KindOther
)

func (k FieldKind) String() string {
	switch k {
	case KindInt:
		return "integer"
	case KindChars:
		return "char array"
	case KindDataLoc:
		return "__data_loc array"
	case KindRelLoc:
		return "__rel_loc array"
	case KindOther:
		return "other"
	}
	return "FieldKind(" + strconv.Itoa(int(k)) + ")"
}

// A Field is one field of a trace event, as its format file describes it.
type Field struct {
	// Name is the field's name, without an array suffix.
	Name string
	// Type is the field's type as the kernel registered it: "u64",
	// "char[16]", "__data_loc char[]", "__rel_loc char[]", "struct foo".
	// The format file prints fixed and __rel_loc arrays with the brackets
	// after the name (char name[16]); Type puts them back on the type.
	Type string
	// Offset is the field's offset in the record, which starts with the
	// common fields (8 bytes for struct trace_entry on current kernels).
	Offset int
	// Size is the field's size in the record: 4 for __data_loc and
	// __rel_loc fields, whose data follows the fixed part.
	Size int
	// Signed is the format file's signed flag. The kernel sets it for
	// user_events fields whose type does not start with "u", so it means
	// something only for integers.
	Signed bool
	// Kind says how to read the field.
	Kind FieldKind
	// ArrayLen is N for a fixed array type[N], 0 otherwise.
	ArrayLen int
	// Line is the field's line in the format file, for error messages.
	Line int
}

// IsString reports whether the field can be read as a string: a char
// array, or a __data_loc or __rel_loc char array.
func (f *Field) IsString() bool {
	switch f.Kind {
	case KindChars:
		return true
	case KindDataLoc, KindRelLoc:
		elem := f.Type[strings.IndexByte(f.Type, ' ')+1:]
		return elem == "char[]" || elem == "unsigned char[]"
	}
	return false
}

// A Format is a trace event's format file: its name, its id (the event
// type perf_tp_event receives) and its fields.
type Format struct {
	Name string
	ID   uint32
	// Common are the common fields (common_type, common_flags,
	// common_preempt_count, common_pid): struct trace_entry.
	Common []Field
	// Fields are the event's own fields, in record order.
	Fields []Field
}

// CommonSize is the size of the common fields: where the event's own
// payload starts in the record.
func (f *Format) CommonSize() int {
	end := 0
	for _, c := range f.Common {
		end = max(end, c.Offset+c.Size)
	}
	return end
}

// Field returns the event field called name, or nil.
func (f *Format) Field(name string) *Field {
	for i := range f.Fields {
		if f.Fields[i].Name == name {
			return &f.Fields[i]
		}
	}
	return nil
}

// FieldNames returns the names of the event's own fields, in order.
func (f *Format) FieldNames() []string {
	out := make([]string, len(f.Fields))
	for i := range f.Fields {
		out[i] = f.Fields[i].Name
	}
	return out
}

// ParseFormat parses the contents of a trace event's format file. path
// names the file in errors, which have the form "path:line:col: message";
// every error in the file is reported, joined.
func ParseFormat(path string, data []byte) (*Format, error) {
	p := formatParser{path: path}
	f := &Format{}
	lines := strings.Split(string(data), "\n")
	state := 0 // 0: header, 1: common fields, 2: event fields, 3: print fmt
	haveName, haveID, haveFormat := false, false, false
	for i, line := range lines {
		ln := i + 1
		switch {
		case state == 0 && strings.HasPrefix(line, "name: "):
			f.Name = strings.TrimSpace(line[len("name: "):])
			if f.Name == "" {
				p.errorf(ln, len("name: ")+1, "empty event name")
			}
			haveName = true
		case state == 0 && strings.HasPrefix(line, "ID: "):
			v := strings.TrimSpace(line[len("ID: "):])
			id, err := strconv.ParseUint(v, 10, 32)
			if err != nil {
				p.errorf(ln, len("ID: ")+1, "event id %q is not a number", v)
			}
			f.ID = uint32(id)
			haveID = true
		case state == 0 && line == "format:":
			haveFormat = true
			state = 1
		case state == 0 && strings.TrimSpace(line) == "":
		case state == 0:
			p.errorf(ln, 1, "unexpected line %q before format: (want name:, ID: and format:)", clip(line))
		case (state == 1 || state == 2) && strings.TrimSpace(line) == "":
			if state == 1 && len(f.Common) > 0 {
				state = 2
			}
		case (state == 1 || state == 2) && strings.HasPrefix(line, "print fmt:"):
			state = 3
		case state == 1 || state == 2:
			fld, ok := p.field(ln, line)
			if !ok {
				continue
			}
			if state == 1 {
				f.Common = append(f.Common, fld)
			} else {
				f.Fields = append(f.Fields, fld)
			}
		}
	}
	if !haveName {
		p.errorf(1, 1, "no name: line")
	}
	if !haveID {
		p.errorf(1, 1, "no ID: line")
	}
	if !haveFormat {
		p.errorf(1, 1, "no format: line")
	}
	// Fields must not overlap the common fields or each other, and must
	// come in order: the BPF side trusts these offsets.
	end := f.CommonSize()
	for i := range f.Fields {
		fld := &f.Fields[i]
		if fld.Offset < end {
			p.errorf(fld.Line, 1, "field %s at offset %d overlaps the field before it (which ends at %d)", fld.Name, fld.Offset, end)
		}
		end = fld.Offset + fld.Size
	}
	seen := map[string]int{}
	for _, fld := range f.Fields {
		if prev, dup := seen[fld.Name]; dup {
			p.errorf(fld.Line, 1, "field %s repeats the one on line %d", fld.Name, prev)
		}
		seen[fld.Name] = fld.Line
	}
	if len(p.errs) > 0 {
		return nil, errors.Join(p.errs...)
	}
	return f, nil
}

type formatParser struct {
	path string
	errs []error
}

func (p *formatParser) errorf(line, col int, format string, a ...any) {
	p.errs = append(p.errs, fmt.Errorf("%s:%d:%d: %s", p.path, line, col, fmt.Sprintf(format, a...)))
}

func clip(s string) string {
	if len(s) > 60 {
		return s[:57] + "..."
	}
	return s
}

// field parses "\tfield:TYPE NAME;\toffset:N;\tsize:N;\tsigned:N;".
func (p *formatParser) field(ln int, line string) (Field, bool) {
	f := Field{Line: ln}
	rest := strings.TrimLeft(line, " \t")
	col := len(line) - len(rest) + 1
	decl, ok := strings.CutPrefix(rest, "field:")
	if !ok {
		p.errorf(ln, col, "want field:TYPE NAME; offset:N; size:N; signed:N; got %q", clip(rest))
		return f, false
	}
	col += len("field:")
	parts := strings.Split(decl, ";")
	// parts: "TYPE NAME", "\toffset:N", "\tsize:N", "\tsigned:N", ""
	if len(parts) < 4 {
		p.errorf(ln, col, "want TYPE NAME; offset:N; size:N; signed:N; got %q", clip(decl))
		return f, false
	}
	good := p.decl(ln, col, parts[0], &f)
	col += len(parts[0]) + 1
	var off, size, signed int
	for i, want := range []struct {
		key string
		dst *int
	}{{"offset", &off}, {"size", &size}, {"signed", &signed}} {
		part := parts[1+i]
		kv := strings.TrimLeft(part, " \t")
		kcol := col + len(part) - len(kv)
		col += len(part) + 1
		v, ok := strings.CutPrefix(kv, want.key+":")
		if !ok {
			p.errorf(ln, kcol, "want %s:N, got %q", want.key, clip(kv))
			return f, false
		}
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 || n > 1<<16 {
			p.errorf(ln, kcol+len(want.key)+1, "%s %q is not a number from 0 to 65536", want.key, v)
			good = false
			continue
		}
		*want.dst = n
	}
	if !good {
		return f, false
	}
	f.Offset, f.Size, f.Signed = off, size, signed != 0
	switch f.Kind {
	case KindInt:
		if size != 1 && size != 2 && size != 4 && size != 8 {
			f.Kind = KindOther // e.g. __int128, or an integer typedef of odd size
		}
	case KindChars:
		// The size: line is the truth. The length in brackets comes from
		// ftrace_event_field.len, which user_events never sets (6.12:
		// user_event_add_field allocates the field with kmalloc, not
		// kzalloc), so a user_event's array may show any length there.
		if size == 0 {
			f.Kind, f.ArrayLen = KindOther, 0
			break
		}
		if f.ArrayLen != size {
			f.ArrayLen = size
			f.Type = f.Type[:strings.IndexByte(f.Type, '[')] + "[" + strconv.Itoa(size) + "]"
		}
	case KindDataLoc, KindRelLoc:
		if size != 4 {
			p.errorf(ln, 1, "field %s: a %s is 4 bytes, size is %d", f.Name, f.Kind, size)
			return f, false
		}
	}
	return f, true
}

// intTypes are the integer types of trace event fields: the user_events
// ones and common kernel ones. Their width comes from the size: line.
var intTypes = map[string]bool{
	"u8": true, "u16": true, "u32": true, "u64": true,
	"s8": true, "s16": true, "s32": true, "s64": true,
	"__u8": true, "__u16": true, "__u32": true, "__u64": true,
	"__s8": true, "__s16": true, "__s32": true, "__s64": true,
	"char": true, "unsigned char": true, "signed char": true,
	"short": true, "unsigned short": true,
	"int": true, "unsigned int": true, "unsigned": true,
	"long": true, "unsigned long": true, "long long": true, "unsigned long long": true,
	"pid_t": true, "bool": true, "size_t": true, "ssize_t": true, "gfp_t": true, "dev_t": true,
	"uid_t": true, "gid_t": true, "ino_t": true, "loff_t": true, "u_int": true,
}

// decl parses "TYPE NAME" where NAME may end in [N] or [], and the
// __data_loc form "__data_loc TYPE[] NAME".
func (p *formatParser) decl(ln, col int, s string, f *Field) bool {
	s = strings.TrimSpace(s)
	sp := strings.LastIndexAny(s, " \t")
	if sp < 0 {
		p.errorf(ln, col, "want TYPE NAME, got %q", clip(s))
		return false
	}
	typ, name := strings.TrimSpace(s[:sp]), s[sp+1:]
	ncol := col + sp + 1
	suffix := ""
	if i := strings.IndexByte(name, '['); i >= 0 {
		name, suffix = name[:i], name[i:]
		if !strings.HasSuffix(suffix, "]") {
			p.errorf(ln, ncol+i, "unterminated array length in %q", s)
			return false
		}
	}
	if name == "" || strings.ContainsAny(name, "[]*") {
		p.errorf(ln, ncol, "bad field name in %q", clip(s))
		return false
	}
	f.Name = name
	f.Type = typ + suffix
	switch {
	case strings.HasPrefix(typ, "__data_loc "), strings.HasPrefix(typ, "__rel_loc "):
		// "__data_loc char[] name", or "__rel_loc char name[]" — or
		// "name[N]" with N garbage: user_events leaves the field's len
		// unset (see KindChars below). Either way an array of the type.
		f.Kind = KindDataLoc
		if strings.HasPrefix(typ, "__rel_loc ") {
			f.Kind = KindRelLoc
		}
		base := f.Type
		if i := strings.IndexByte(base, '['); i >= 0 {
			base = base[:i]
		} else {
			f.Kind = KindOther // not an array
		}
		f.Type = base + "[]"
	case suffix != "":
		n, err := strconv.Atoi(suffix[1 : len(suffix)-1])
		isChar := typ == "char" || typ == "unsigned char" || typ == "signed char"
		switch {
		case suffix == "[]" || !isChar:
			f.Kind = KindOther // a flexible array, or not of chars
		case err != nil && !isNumber(suffix[1:len(suffix)-1]):
			f.Kind = KindOther // a symbolic length (TASK_COMM_LEN)
		default:
			// A length, maybe garbage (see KindChars in field): the
			// size: line gives the real one.
			f.Kind = KindChars
			if n > 0 {
				f.ArrayLen = n
			}
		}
	case intTypes[typ]:
		f.Kind = KindInt
	default:
		f.Kind = KindOther
	}
	return true
}

// isNumber reports whether s is a decimal integer, maybe negative and
// maybe too large for an int.
func isNumber(s string) bool {
	s = strings.TrimPrefix(s, "-")
	if s == "" {
		return false
	}
	for _, c := range s {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}
