package userevents

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// maxDescription is the kernel's limit on a format string (MAX_EVENT_DESC),
// including the terminating NUL.
const maxDescription = 512

// maxArray is the kernel's limit on N in char[N] (MAX_FIELD_ARRAY_SIZE).
const maxArray = 1024

// A Field is one field of a user_event's payload, as the kernel's format
// string spells it: a type and a name. Types are u8, u16, u32, u64, s8, s16,
// s32, s64, int, unsigned int, short, unsigned short, char, unsigned char,
// char[N], unsigned char[N] (N up to 1024), "__data_loc char[]" and
// "__rel_loc char[]" (variable-length data located by a u32), and
// "struct NAME SIZE" (an opaque blob of SIZE bytes; Format spells it the
// kernel's way, "struct NAME field SIZE").
type Field struct {
	Type string
	Name string
}

// Format builds the format string Register takes from an event name and its
// fields, in payload order, and checks it the way the kernel will, so a
// mistake is reported with the field at fault rather than as the kernel's
// bare EINVAL.
func Format(name string, fields ...Field) (string, error) {
	if err := checkName(name); err != nil {
		return "", err
	}
	var b strings.Builder
	b.WriteString(name)
	for i, f := range fields {
		if _, err := f.Size(); err != nil {
			return "", fmt.Errorf("event %s: field %d (%q): %w", name, i, f.Name, err)
		}
		if i == 0 {
			b.WriteByte(' ')
		} else {
			b.WriteString("; ")
		}
		if rest, ok := strings.CutPrefix(f.Type, "struct "); ok {
			// The kernel wants the size after the field name:
			// "struct NAME field SIZE".
			tag, size, _ := strings.Cut(rest, " ")
			fmt.Fprintf(&b, "struct %s %s %s", tag, f.Name, size)
			continue
		}
		b.WriteString(f.Type)
		b.WriteByte(' ')
		b.WriteString(f.Name)
	}
	if b.Len() >= maxDescription {
		return "", fmt.Errorf("event %s: format is %d bytes, the kernel allows %d", name, b.Len(), maxDescription-1)
	}
	return b.String(), nil
}

// Size returns the number of bytes the field takes in the payload: the
// kernel's own sizes, 4 for a __data_loc or __rel_loc field (the data follows
// the fixed part).
func (f Field) Size() (int, error) {
	if err := checkFieldName(f.Name); err != nil {
		return 0, err
	}
	t := f.Type
	switch t {
	case "u8", "s8", "char", "unsigned char":
		return 1, nil
	case "u16", "s16", "short", "unsigned short":
		return 2, nil
	case "u32", "s32", "int", "unsigned int":
		return 4, nil
	case "u64", "s64":
		return 8, nil
	}
	if rest, ok := strings.CutPrefix(t, "struct "); ok {
		tag, size, ok := strings.Cut(rest, " ")
		if !ok || tag == "" || strings.Contains(size, " ") {
			return 0, fmt.Errorf("type %q: want \"struct NAME SIZE\"", t)
		}
		n, err := strconv.ParseUint(size, 10, 32)
		if err != nil || n == 0 {
			return 0, fmt.Errorf("type %q: size must be a positive decimal number", t)
		}
		return int(n), nil
	}
	for _, p := range []string{"__data_loc ", "__rel_loc "} {
		if rest, ok := strings.CutPrefix(t, p); ok {
			if !strings.HasSuffix(rest, "[]") || rest == "[]" {
				return 0, fmt.Errorf("type %q: want %s<type>[]", t, p)
			}
			return 4, nil
		}
	}
	for _, p := range []string{"char[", "unsigned char["} {
		if rest, ok := strings.CutPrefix(t, p); ok {
			size, ok := strings.CutSuffix(rest, "]")
			n, err := strconv.ParseUint(size, 0, 32)
			if !ok || err != nil || n == 0 || n > maxArray {
				return 0, fmt.Errorf("type %q: array length must be 1 to %d", t, maxArray)
			}
			return int(n), nil
		}
	}
	return 0, fmt.Errorf("unknown type %q (want u8..u64, s8..s64, char[N], __rel_loc char[] or struct NAME SIZE)", t)
}

func checkName(name string) error {
	if name == "" {
		return errors.New("empty event name")
	}
	for _, r := range name {
		if !(r == '_' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9') {
			return fmt.Errorf("event name %q: only letters, digits and _ are allowed", name)
		}
	}
	return nil
}

func checkFieldName(name string) error {
	if name == "" {
		return errors.New("empty field name")
	}
	if strings.ContainsAny(name, " \t;:") {
		return fmt.Errorf("field name %q: spaces, ';' and ':' are not allowed", name)
	}
	return nil
}

// eventName returns the name part of a format string: everything before the
// first space, or the whole string.
func eventName(format string) string {
	name, _, _ := strings.Cut(strings.TrimSpace(format), " ")
	return name
}
