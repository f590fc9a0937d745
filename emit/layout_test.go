package emit

import (
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"unsafe"
)

// TestLayoutMatchesHeader checks the Go mirror of struct span_event against
// bpf/span_event.h, and the user_events format string against both.
func TestLayoutMatchesHeader(t *testing.T) {
	src, err := os.ReadFile("../bpf/span_event.h")
	if err != nil {
		t.Fatal(err)
	}
	body := regexp.MustCompile(`(?s)struct span_event \{(.*?)\};`).FindSubmatch(src)
	if body == nil {
		t.Fatal("struct span_event not found in bpf/span_event.h")
	}
	consts := map[string]int{}
	for _, m := range regexp.MustCompile(`(?m)(?:#define (?:\w+) |^\s*)(\w+)(?: = |\s)(\d+),?\s*$`).FindAllSubmatch(src, -1) {
		n, _ := strconv.Atoi(string(m[2]))
		consts[string(m[1])] = n
	}
	type field struct {
		name string
		size int
	}
	var cFields []field
	sizes := map[string]int{"__u8": 1, "char": 1, "__u32": 4, "__u64": 8}
	re := regexp.MustCompile(`^\s*(\w+)\s+(\w+)(?:\[(\w+)\])?;`)
	for _, line := range strings.Split(string(body[1]), "\n") {
		m := re.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		n := 1
		if m[3] != "" {
			if v, ok := consts[m[3]]; ok {
				n = v
			} else {
				n, _ = strconv.Atoi(m[3])
			}
		}
		cFields = append(cFields, field{m[2], sizes[m[1]] * n})
	}
	goFields := []struct {
		off, size uintptr
	}{
		{unsafe.Offsetof(event{}.DurationNs), unsafe.Sizeof(event{}.DurationNs)},
		{unsafe.Offsetof(event{}.StartNs), unsafe.Sizeof(event{}.StartNs)},
		{unsafe.Offsetof(event{}.Status), unsafe.Sizeof(event{}.Status)},
		{unsafe.Offsetof(event{}.Flags), unsafe.Sizeof(event{}.Flags)},
		{unsafe.Offsetof(event{}.TraceID), unsafe.Sizeof(event{}.TraceID)},
		{unsafe.Offsetof(event{}.SpanID), unsafe.Sizeof(event{}.SpanID)},
		{unsafe.Offsetof(event{}.ExecID), unsafe.Sizeof(event{}.ExecID)},
		{unsafe.Offsetof(event{}.Name), unsafe.Sizeof(event{}.Name)},
	}
	if len(cFields) != len(goFields) {
		t.Fatalf("C struct has %d fields, Go mirror %d", len(cFields), len(goFields))
	}
	off := 0
	for i, f := range cFields {
		if uintptr(off) != goFields[i].off || uintptr(f.size) != goFields[i].size {
			t.Errorf("field %s: C offset %d size %d, Go offset %d size %d", f.name, off, f.size, goFields[i].off, goFields[i].size)
		}
		off += f.size
	}
	if off != eventSize {
		t.Errorf("C struct is %d bytes, Go %d", off, eventSize)
	}
	// The format string names the same fields with the same sizes.
	ue := map[string]int{"u64": 8, "u32": 4}
	parts := strings.Split(strings.TrimPrefix(Format, EventName+" "), "; ")
	if len(parts) != len(cFields) {
		t.Fatalf("format has %d fields, struct %d", len(parts), len(cFields))
	}
	for i, p := range parts {
		typ, name, _ := strings.Cut(p, " ")
		size := ue[typ]
		if m := regexp.MustCompile(`^char\[(\d+)\]$`).FindStringSubmatch(typ); m != nil {
			size, _ = strconv.Atoi(m[1])
		}
		if name != cFields[i].name || size != cFields[i].size {
			t.Errorf("format field %q: want %s of %d bytes", p, cFields[i].name, cFields[i].size)
		}
	}
}
