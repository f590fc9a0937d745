package tracefs

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// userEventFormat is what kernel 6.12 prints for a user_event registered as
// "uev_req u64 dur_ns; s32 status; char[16] route; __rel_loc char[] name;
// __data_loc char[] path; struct blob b 12; unsigned int n" (f_show in
// kernel/trace/trace_events.c: fixed and __rel_loc arrays print their
// brackets after the name, __data_loc ones after the type).
const userEventFormat = `name: uev_req
ID: 1234
format:
	field:unsigned short common_type;	offset:0;	size:2;	signed:0;
	field:unsigned char common_flags;	offset:2;	size:1;	signed:0;
	field:unsigned char common_preempt_count;	offset:3;	size:1;	signed:0;
	field:int common_pid;	offset:4;	size:4;	signed:1;

	field:u64 dur_ns;	offset:8;	size:8;	signed:0;
	field:s32 status;	offset:16;	size:4;	signed:1;
	field:char route[16];	offset:20;	size:16;	signed:1;
	field:__rel_loc char name[];	offset:36;	size:4;	signed:1;
	field:__data_loc char[] path;	offset:40;	size:4;	signed:1;
	field:struct blob b;	offset:44;	size:12;	signed:1;
	field:unsigned int n;	offset:56;	size:4;	signed:0;

print fmt: "dur_ns=%llu status=%d route=%s name=%s path=%s b=ARRAY[...] n=%u", REC->dur_ns, REC->status, REC->route, __get_rel_str(name), __get_str(path), REC->n
`

func TestParseFormatUserEvent(t *testing.T) {
	f, err := ParseFormat("format", []byte(userEventFormat))
	if err != nil {
		t.Fatal(err)
	}
	if f.Name != "uev_req" || f.ID != 1234 || len(f.Common) != 4 || f.CommonSize() != 8 {
		t.Fatalf("name %q id %d common %d (%d bytes)", f.Name, f.ID, len(f.Common), f.CommonSize())
	}
	want := []Field{
		{Name: "dur_ns", Type: "u64", Offset: 8, Size: 8, Kind: KindInt, Line: 9},
		{Name: "status", Type: "s32", Offset: 16, Size: 4, Signed: true, Kind: KindInt, Line: 10},
		{Name: "route", Type: "char[16]", Offset: 20, Size: 16, Signed: true, Kind: KindChars, ArrayLen: 16, Line: 11},
		{Name: "name", Type: "__rel_loc char[]", Offset: 36, Size: 4, Signed: true, Kind: KindRelLoc, Line: 12},
		{Name: "path", Type: "__data_loc char[]", Offset: 40, Size: 4, Signed: true, Kind: KindDataLoc, Line: 13},
		{Name: "b", Type: "struct blob", Offset: 44, Size: 12, Signed: true, Kind: KindOther, Line: 14},
		{Name: "n", Type: "unsigned int", Offset: 56, Size: 4, Kind: KindInt, Line: 15},
	}
	if !reflect.DeepEqual(f.Fields, want) {
		t.Fatalf("fields\n got %+v\nwant %+v", f.Fields, want)
	}
	for name, str := range map[string]bool{"dur_ns": false, "route": true, "name": true, "path": true, "b": false} {
		if got := f.Field(name).IsString(); got != str {
			t.Errorf("%s: IsString %t, want %t", name, got, str)
		}
	}
	if f.Field("nope") != nil {
		t.Error("Field found a field that does not exist")
	}
}

// TestParseFormatGarbageArrayLength: kernel 6.12 prints a user_event's
// array fields with the uninitialized ftrace_event_field.len in the
// brackets (seen in the VM: "__rel_loc char route[1566274145]"); the
// size: line decides.
func TestParseFormatGarbageArrayLength(t *testing.T) {
	text := "name: e\nID: 7\nformat:\n\tfield:unsigned short common_type;\toffset:0;\tsize:2;\tsigned:0;\n\tfield:int common_pid;\toffset:4;\tsize:4;\tsigned:1;\n\n" +
		"\tfield:__rel_loc char route[1566274145];\toffset:8;\tsize:4;\tsigned:1;\n" +
		"\tfield:char name[-2093];\toffset:12;\tsize:16;\tsigned:1;\n" +
		"\tfield:char tag[8];\toffset:28;\tsize:8;\tsigned:1;\n" +
		"\tfield:char big[99999999999999999999];\toffset:36;\tsize:4;\tsigned:1;\n"
	f, err := ParseFormat("f", []byte(text))
	if err != nil {
		t.Fatal(err)
	}
	want := []Field{
		{Name: "route", Type: "__rel_loc char[]", Offset: 8, Size: 4, Signed: true, Kind: KindRelLoc, Line: 7},
		{Name: "name", Type: "char[16]", Offset: 12, Size: 16, Signed: true, Kind: KindChars, ArrayLen: 16, Line: 8},
		{Name: "tag", Type: "char[8]", Offset: 28, Size: 8, Signed: true, Kind: KindChars, ArrayLen: 8, Line: 9},
		{Name: "big", Type: "char[4]", Offset: 36, Size: 4, Signed: true, Kind: KindChars, ArrayLen: 4, Line: 10},
	}
	if !reflect.DeepEqual(f.Fields, want) {
		t.Fatalf("fields\n got %+v\nwant %+v", f.Fields, want)
	}
	if !f.Field("route").IsString() || !f.Field("name").IsString() {
		t.Error("not strings")
	}
}

func TestParseFormatErrors(t *testing.T) {
	header := "name: e\nID: 7\nformat:\n\tfield:unsigned short common_type;\toffset:0;\tsize:2;\tsigned:0;\n\tfield:int common_pid;\toffset:4;\tsize:4;\tsigned:1;\n\n"
	for _, tc := range []struct {
		name, text string
		want       []string
	}{
		{"no id", "name: e\nformat:\n", []string{"f:1:1: no ID: line"}},
		{"bad id", "name: e\nID: x\nformat:\n", []string{`f:2:5: event id "x" is not a number`}},
		{"junk before format", "name: e\nID: 1\nwhat\nformat:\n", []string{`f:3:1: unexpected line "what"`}},
		{"not a field", header + "\tfield u64 x;\toffset:8;\tsize:8;\tsigned:0;\n", []string{`f:7:2: want field:TYPE NAME`}},
		{"bad offset", header + "\tfield:u64 x;\toffset:y;\tsize:8;\tsigned:0;\n", []string{`f:7:22: offset "y" is not a number`}},
		{"missing size", header + "\tfield:u64 x;\toffset:8;\tsigned:0;\n", []string{`f:7:25: want size:N, got "signed:0"`}},
		{"no name", header + "\tfield:u64;\toffset:8;\tsize:8;\tsigned:0;\n\tfield:u32;\toffset:16;\tsize:4;\tsigned:0;\n",
			[]string{`f:7:8: want TYPE NAME, got "u64"`, `f:8:8: want TYPE NAME, got "u32"`}},
		{"overlap", header + "\tfield:u64 x;\toffset:8;\tsize:8;\tsigned:0;\n\tfield:u32 y;\toffset:12;\tsize:4;\tsigned:0;\n",
			[]string{"f:8:1: field y at offset 12 overlaps the field before it (which ends at 16)"}},
		{"overlaps common", header + "\tfield:u64 x;\toffset:4;\tsize:8;\tsigned:0;\n", []string{"f:7:1: field x at offset 4 overlaps"}},
		{"rel_loc size", header + "\tfield:__rel_loc char s[];\toffset:8;\tsize:8;\tsigned:0;\n", []string{"f:7:1: field s: a __rel_loc array is 4 bytes, size is 8"}},
		{"repeated", header + "\tfield:u32 x;\toffset:8;\tsize:4;\tsigned:0;\n\tfield:u32 x;\toffset:12;\tsize:4;\tsigned:0;\n",
			[]string{"f:8:1: field x repeats the one on line 7"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseFormat("f", []byte(tc.text))
			if err == nil {
				t.Fatal("no error")
			}
			lines := strings.Split(err.Error(), "\n")
			if len(lines) != len(tc.want) {
				t.Fatalf("%d errors, want %d:\n%v", len(lines), len(tc.want), err)
			}
			for i, w := range tc.want {
				if !strings.HasPrefix(lines[i], w) {
					t.Errorf("error %d: %q, want prefix %q", i, lines[i], w)
				}
			}
		})
	}
}

// TestParseFormatKernelEvents parses every format file of the running
// kernel: the parser must take all of them.
func TestParseFormatKernelEvents(t *testing.T) {
	files, _ := filepath.Glob("/sys/kernel/tracing/events/*/*/format")
	if len(files) == 0 {
		t.Skip("no tracefs mounted at /sys/kernel/tracing (or not readable)")
	}
	kinds := map[FieldKind]int{}
	for _, path := range files {
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		f, err := ParseFormat(path, b)
		if err != nil {
			t.Errorf("%v", err)
			continue
		}
		if f.CommonSize() != 8 {
			t.Errorf("%s: common fields are %d bytes, want 8 (struct trace_entry)", path, f.CommonSize())
		}
		for _, fld := range f.Fields {
			kinds[fld.Kind]++
		}
	}
	t.Logf("%d format files; fields by kind: %v", len(files), kinds)
	for _, k := range []FieldKind{KindInt, KindChars, KindDataLoc} {
		if kinds[k] == 0 {
			t.Errorf("no %s field in any of %d events", k, len(files))
		}
	}
}

func TestNearest(t *testing.T) {
	for _, tc := range []struct {
		name  string
		cands []string
		want  string
	}{
		{"dur_sn", []string{"dur_ns", "status"}, "dur_ns"},
		{"statsu", []string{"dur_ns", "status"}, "status"},
		{"x", []string{"dur_ns", "status"}, ""},
		{"route", []string{"route"}, "route"},
		{"request_done", []string{"request__done", "query__start"}, "request__done"},
	} {
		if got := Nearest(tc.name, tc.cands); got != tc.want {
			t.Errorf("Nearest(%q) = %q, want %q", tc.name, got, tc.want)
		}
	}
}
