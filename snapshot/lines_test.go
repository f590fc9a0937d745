package snapshot

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"reflect"
	"strings"
	"testing"
	"time"
)

// TestEncodeStreams checks that Encode, which writes item by item, writes
// what json.Encoder writes for the whole snapshot.
func TestEncodeStreams(t *testing.T) {
	empty := &Snapshot{Version: Version, Time: time.Unix(1, 0).UTC(), Series: []Series{}}
	part := full()
	part.Part, part.More = 2, true
	for _, s := range []*Snapshot{full(), empty, {Version: Version}, part} {
		var want bytes.Buffer
		enc := json.NewEncoder(&want)
		enc.SetIndent("", "  ")
		if err := enc.Encode(s); err != nil {
			t.Fatal(err)
		}
		var got bytes.Buffer
		if err := s.Encode(&got); err != nil {
			t.Fatal(err)
		}
		if got.String() != want.String() {
			t.Errorf("Encode:\n%s\njson.Encoder:\n%s", got.String(), want.String())
		}
	}
}

// many is a snapshot of n series and k overruns, each series a few
// hundred bytes of JSON.
func many(n, k int) *Snapshot {
	s := full()
	base := s.Series[0]
	s.Series = nil
	for i := 0; i < n; i++ {
		sr := base
		sr.Span = fmt.Sprintf("GET /api/v1/items/%d", i)
		sr.CgroupID = uint64(i)
		s.Series = append(s.Series, sr)
	}
	ov := s.Overruns[0]
	s.Overruns = nil
	for i := 0; i < k; i++ {
		o := ov
		o.PID = uint32(i)
		s.Overruns = append(s.Overruns, o)
	}
	return s
}

// TestLineWriterSplits writes snapshots small and large under several
// bounds: every line is at most the bound (or holds a single item), is a
// snapshot the schema accepts, and a Reader gives back each snapshot
// whole and equal to what was written; a snapshot that fits is one line
// without part fields, as before.
func TestLineWriterSplits(t *testing.T) {
	schema := compileSchema(t)
	small, big, overrunsOnly := many(3, 1), many(5000, 40), many(0, 30)
	for _, max := range []int{MinMaxLine, 64 << 10, DefaultMaxLine} {
		var buf bytes.Buffer
		lw := NewLineWriter(&buf, max)
		want := []*Snapshot{small, big, small, overrunsOnly}
		var lines []int
		for _, s := range want {
			n, err := lw.Write(s)
			if err != nil {
				t.Fatal(err)
			}
			lines = append(lines, n)
		}
		if lines[0] != 1 || lines[2] != 1 || (max < DefaultMaxLine && lines[1] < 2) {
			t.Errorf("max %d: lines per snapshot %v", max, lines)
		}
		for i, line := range strings.Split(strings.TrimSuffix(buf.String(), "\n"), "\n") {
			var probe struct {
				Series   []json.RawMessage
				Overruns []json.RawMessage
				Part     int
			}
			if err := json.Unmarshal([]byte(line), &probe); err != nil {
				t.Fatalf("max %d: line %d: %v", max, i, err)
			}
			if len(line) > max && len(probe.Series)+len(probe.Overruns) > 1 {
				t.Errorf("max %d: line %d is %d bytes with %d items", max, i, len(line), len(probe.Series)+len(probe.Overruns))
			}
			doc, err := jsonUnmarshalAny(line)
			if err != nil {
				t.Fatal(err)
			}
			if err := schema.Validate(doc); err != nil {
				t.Errorf("max %d: line %d: schema: %v", max, i, err)
			}
		}
		r := NewReader(&buf)
		for i, w := range want {
			got, err := r.Next()
			if err != nil {
				t.Fatalf("max %d: snapshot %d: %v", max, i, err)
			}
			if w.Series == nil {
				w.Series = []Series{} // written as [], as the schema wants
			}
			if !reflect.DeepEqual(got, w) {
				t.Errorf("max %d: snapshot %d read back differs: %d series %d overruns, want %d %d", max, i, len(got.Series), len(got.Overruns), len(w.Series), len(w.Overruns))
			}
		}
		if _, err := r.Next(); !errors.Is(err, io.EOF) {
			t.Errorf("max %d: after the last snapshot: %v, want EOF", max, err)
		}
	}
}

func jsonUnmarshalAny(s string) (any, error) {
	var v any
	d := json.NewDecoder(strings.NewReader(s))
	d.UseNumber()
	return v, d.Decode(&v)
}

// TestReaderParts: the tail of a snapshot at the start of a stream (a
// rotated file) and the head of one at its end (an agent stopped while
// writing) are skipped and counted; a part missing or foreign in between
// is an error that says which value.
func TestReaderParts(t *testing.T) {
	var buf bytes.Buffer
	lw := NewLineWriter(&buf, MinMaxLine)
	for range 2 {
		if _, err := lw.Write(many(500, 0)); err != nil {
			t.Fatal(err)
		}
	}
	lines := strings.Split(strings.TrimSuffix(buf.String(), "\n"), "\n")
	per := len(lines) / 2
	if per < 3 {
		t.Fatalf("%d lines a snapshot", per)
	}
	read := func(ls []string) (int, int, error) {
		r := NewReader(strings.NewReader(strings.Join(ls, "\n")))
		n := 0
		for {
			_, err := r.Next()
			if errors.Is(err, io.EOF) {
				return n, r.Skipped(), nil
			}
			if err != nil {
				return n, r.Skipped(), err
			}
			n++
		}
	}
	for name, tc := range map[string]struct {
		lines          []string
		whole, skipped int
		err            string
	}{
		"both":           {lines, 2, 0, ""},
		"rotated head":   {lines[1:], 1, per - 1, ""},
		"cut tail":       {lines[:len(lines)-1], 1, per - 1, ""},
		"a part missing": {append(append([]string{}, lines[:per+1]...), lines[per+2:]...), 1, 0, "after part 1"},
		"interleaved":    {append(append([]string{}, lines[:2]...), lines[per:]...), 0, 0, "after part 2"},
	} {
		whole, skipped, err := read(tc.lines)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%s: %v, want an error with %q", name, err, tc.err)
			}
			continue
		}
		if err != nil || whole != tc.whole || skipped != tc.skipped {
			t.Errorf("%s: %d snapshots, %d parts skipped, %v; want %d and %d", name, whole, skipped, err, tc.whole, tc.skipped)
		}
	}
}
