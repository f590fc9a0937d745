package userevents

import (
	"strings"
	"testing"
)

func TestFormat(t *testing.T) {
	tests := []struct {
		name    string
		event   string
		fields  []Field
		want    string
		wantErr string
	}{
		{name: "no fields", event: "ping", want: "ping"},
		{
			name:  "span",
			event: "spanwatch_span",
			fields: []Field{
				{"u64", "duration_ns"}, {"u64", "start_ns"}, {"u32", "status"},
				{"u32", "flags"}, {"unsigned char[16]", "trace_id"},
				{"unsigned char[8]", "span_id"}, {"char[64]", "name"},
			},
			want: "spanwatch_span u64 duration_ns; u64 start_ns; u32 status; u32 flags; unsigned char[16] trace_id; unsigned char[8] span_id; char[64] name",
		},
		{
			name:   "struct size goes after the field name",
			event:  "blob",
			fields: []Field{{"struct ids 24", "ids"}},
			want:   "blob struct ids ids 24",
		},
		{
			name:   "rel_loc and data_loc",
			event:  "msg",
			fields: []Field{{"__rel_loc char[]", "text"}, {"__data_loc unsigned char[]", "raw"}},
			want:   "msg __rel_loc char[] text; __data_loc unsigned char[] raw",
		},
		{name: "empty name", event: "", wantErr: "empty event name"},
		{name: "name with space", event: "a b", wantErr: `event name "a b"`},
		{name: "name with colon", event: "a:b", wantErr: `event name "a:b"`},
		{name: "unknown type", event: "e", fields: []Field{{"u128", "x"}}, wantErr: `field 0 ("x"): unknown type "u128"`},
		{name: "long is ambiguous", event: "e", fields: []Field{{"long", "x"}}, wantErr: `unknown type "long"`},
		{name: "array too long", event: "e", fields: []Field{{"char[1025]", "x"}}, wantErr: "array length must be 1 to 1024"},
		{name: "array zero", event: "e", fields: []Field{{"char[0]", "x"}}, wantErr: "array length"},
		{name: "struct without size", event: "e", fields: []Field{{"struct ids", "x"}}, wantErr: `want "struct NAME SIZE"`},
		{name: "data_loc without []", event: "e", fields: []Field{{"__data_loc char", "x"}}, wantErr: "want __data_loc <type>[]"},
		{name: "field name with space", event: "e", fields: []Field{{"u8", "a b"}}, wantErr: `field name "a b"`},
		{name: "empty field name", event: "e", fields: []Field{{"u8", ""}}, wantErr: "empty field name"},
		{
			name:    "too long",
			event:   "e",
			fields:  []Field{{"char[8]", strings.Repeat("x", 250)}, {"char[8]", strings.Repeat("y", 250)}},
			wantErr: "format is 520 bytes, the kernel allows 511",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Format(tt.event, tt.fields...)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("Format() = %q, %v; want error containing %q", got, err, tt.wantErr)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Fatalf("Format() = %q, %v; want %q", got, err, tt.want)
			}
		})
	}
}

func TestFieldSize(t *testing.T) {
	tests := []struct {
		typ  string
		want int
	}{
		{"u8", 1}, {"s8", 1}, {"char", 1}, {"unsigned char", 1},
		{"u16", 2}, {"short", 2}, {"unsigned short", 2},
		{"u32", 4}, {"s32", 4}, {"int", 4}, {"unsigned int", 4},
		{"u64", 8}, {"s64", 8},
		{"char[64]", 64}, {"unsigned char[16]", 16}, {"char[0x10]", 16},
		{"__rel_loc char[]", 4}, {"__data_loc char[]", 4},
		{"struct x 24", 24},
	}
	total := 0
	for _, tt := range tests {
		got, err := Field{Type: tt.typ, Name: "f"}.Size()
		if err != nil || got != tt.want {
			t.Errorf("Field{%q}.Size() = %d, %v; want %d", tt.typ, got, err, tt.want)
		}
		total += got
	}
	if total != 1+1+1+1+2+2+2+4+4+4+4+8+8+64+16+16+4+4+24 {
		t.Errorf("sizes add up to %d", total)
	}
}

func TestEventName(t *testing.T) {
	for format, want := range map[string]string{
		"spanwatch_span u64 a; u64 b": "spanwatch_span",
		"  ping  ":                    "ping",
		"solo":                        "solo",
		"":                            "",
	} {
		if got := eventName(format); got != want {
			t.Errorf("eventName(%q) = %q, want %q", format, got, want)
		}
	}
}
