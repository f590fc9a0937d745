package ehtest

import (
	"embed"
	"encoding/hex"
	"fmt"
	"strings"
	"time"
)

//go:embed testdata/*.golden
var goldens embed.FS

// ParseGolden reads the notation of testdata/*.golden: hex bytes, quoted
// UTF-8 text, # comments.
func ParseGolden(text string) ([]byte, error) {
	var out []byte
	for ln, line := range strings.Split(text, "\n") {
		for i := 0; i < len(line); {
			c := line[i]
			switch {
			case c == ' ' || c == '\t' || c == '\r':
				i++
			case c == '#':
				i = len(line)
			case c == '"':
				i++
				for i < len(line) && line[i] != '"' {
					if line[i] == '\\' && i+1 < len(line) {
						i++
					}
					out = append(out, line[i])
					i++
				}
				if i == len(line) {
					return nil, fmt.Errorf("line %d: unterminated string", ln+1)
				}
				i++
			default:
				if i+2 > len(line) {
					return nil, fmt.Errorf("line %d: odd hex digit", ln+1)
				}
				b, err := hex.DecodeString(line[i : i+2])
				if err != nil {
					return nil, fmt.Errorf("line %d col %d: %w", ln+1, i+1, err)
				}
				out = append(out, b[0])
				i += 2
			}
		}
	}
	return out, nil
}

func mustID(s string, n int) []byte {
	b, err := hex.DecodeString(s)
	if err != nil || len(b) != n {
		panic(s)
	}
	return b
}

func tid(s string) (t [16]byte) { copy(t[:], mustID(s, 16)); return }
func sid(s string) (t [8]byte)  { copy(t[:], mustID(s, 8)); return }

// GoldenCases are the spans of the golden files in testdata.
var GoldenCases = []struct {
	File string
	X    Exporter
	Span Span
}{
	{"basic_main.golden", Exporter{Version: RustMain}, Span{
		Name:    "GET /users",
		Start:   time.Date(2025, 7, 10, 23, 4, 8, 109797282, time.UTC),
		End:     time.Date(2025, 7, 10, 23, 4, 8, 109839907, time.UTC),
		TraceID: tid("0af7651916cd43dd8448eb211c80319c"), SpanID: sid("00f067aa0ba902b7"),
		Kind: 1,
	}},
	{"full_main.golden", Exporter{Version: RustMain, CloudRole: "checkout", CloudRoleInstance: "pod-7"}, Span{
		Name:    "POST /pay",
		Start:   time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC),
		End:     time.Date(2026, 1, 1, 0, 0, 1, 250_000_000, time.UTC),
		TraceID: tid("4bf92f3577b34da6a3ce929d0e0e4736"), SpanID: sid("00f067aa0ba902b7"), ParentID: sid("53995c3f42cd8ad8"),
		Kind: 2, Status: StatusError, StatusDesc: "upstream failed",
		Attributes: []KV{
			{"http.request.method", "POST"}, {"retry", true}, {"http.response.status_code", int64(503)},
			{"ratio", 1.5}, {"url.full", "https://pay/x"}, {"note", "hi"}, {"tags", []string{"a", "b"}},
		},
		Links: []Link{{TraceID: tid("0af7651916cd43dd8448eb211c80319c"), SpanID: sid("b7ad6b7169203331")}},
	}},
	{"utf8_long_050.golden", Exporter{Version: Rust050}, Span{
		Name:    strings.Repeat("заказ/オーダー/🛒 ", 9),
		Start:   time.Date(2025, 12, 31, 23, 59, 59, 999_999_000, time.UTC),
		End:     time.Date(2026, 1, 1, 0, 0, 0, 1500, time.UTC),
		TraceID: tid("00000000000000000000000000000001"), SpanID: sid("0000000000000002"),
		Status: StatusError, StatusDesc: "boom",
		Attributes: []KV{{"db.system", "postgresql"}, {"db.system.name", "pg"}},
	}},
	{"status_main.golden", Exporter{Version: RustMain}, Span{
		Name:    "q",
		Start:   time.Date(2026, 3, 4, 5, 6, 7, 1, time.UTC),
		End:     time.Date(2026, 3, 4, 5, 6, 7, 500_000_000, time.UTC),
		TraceID: tid("ffffffffffffffffffffffffffffffff"), SpanID: sid("ffffffffffffffff"),
		Kind: 4, Status: StatusError, StatusDesc: "timeout",
	}},
}

// Golden returns the bytes of the golden file name (embedded from this
// package's testdata), for tests here and in other packages.
func Golden(name string) ([]byte, error) {
	text, err := goldens.ReadFile("testdata/" + name)
	if err != nil {
		return nil, err
	}
	return ParseGolden(string(text))
}
