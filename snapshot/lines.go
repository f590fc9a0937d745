package snapshot

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"time"
)

// DefaultMaxLine is the longest line a LineWriter writes by default: long
// enough for the largest single item (an overrun with two 127-frame
// stacks and its in-span samples is about 100 KiB), short enough for the
// log shippers that read such files line by line.
const DefaultMaxLine = 1 << 20

// MinMaxLine is the least a line may be bounded to.
const MinMaxLine = 16 << 10

// A LineWriter writes snapshots as JSON lines, one snapshot a line when it
// fits in MaxLine bytes and split into parts, each a line, when it does not
// (see Snapshot.Part): its memory is one line and one item, whatever the
// snapshot's size. A single series or overrun longer than the bound gets a
// line of its own, longer than the bound.
type LineWriter struct {
	w       io.Writer
	maxLine int
	body    bytes.Buffer // the current line's items
	item    bytes.Buffer // the item being added
	enc     *json.Encoder
	line    bytes.Buffer
	stats   bytes.Buffer
	statEnc *json.Encoder
}

// NewLineWriter returns a LineWriter to w with lines of at most maxLine
// bytes (DefaultMaxLine when 0).
func NewLineWriter(w io.Writer, maxLine int) *LineWriter {
	if maxLine <= 0 {
		maxLine = DefaultMaxLine
	}
	lw := &LineWriter{w: w, maxLine: maxLine}
	lw.enc = json.NewEncoder(&lw.item)
	lw.statEnc = json.NewEncoder(&lw.stats)
	return lw
}

// partHead is the part of a line before its items.
type partHead struct {
	Version  int       `json:"version"`
	Time     time.Time `json:"time"`
	WindowNs int64     `json:"window_ns"`
	Host     string    `json:"host,omitempty"`
	Part     int       `json:"part,omitempty"`
	More     bool      `json:"more,omitempty"`
}

// Write writes s as one line, or as parts when it is longer than the
// bound. It returns the number of lines written.
func (lw *LineWriter) Write(s *Snapshot) (int, error) {
	st := lineState{lw: lw, s: s}
	lw.body.Reset()
	for i := range s.Series {
		if err := st.add(&s.Series[i], false); err != nil {
			return st.parts, err
		}
	}
	for i := range s.Overruns {
		if err := st.add(&s.Overruns[i], true); err != nil {
			return st.parts, err
		}
	}
	err := st.flush(false)
	return st.parts, err
}

// lineState is one Write's progress: the parts written, and what the
// current line holds.
type lineState struct {
	lw       *LineWriter
	s        *Snapshot
	parts    int  // lines written
	items    int  // items in the current line
	overruns bool // the current line is past its series
}

// add appends one item to the current line, writing the line first when
// the item would take it past the bound.
func (st *lineState) add(v any, overrun bool) error {
	lw := st.lw
	lw.item.Reset()
	if err := lw.enc.Encode(v); err != nil {
		return fmt.Errorf("write snapshot: %w", err)
	}
	item := bytes.TrimSuffix(lw.item.Bytes(), []byte("\n"))
	// Room for the head (about 150 bytes) and the closing fields.
	if st.items > 0 && lw.body.Len()+len(item)+512 > lw.maxLine {
		if err := st.flush(true); err != nil {
			return err
		}
	}
	switch {
	case st.items == 0 && !overrun:
		lw.body.WriteString(`"series":[`)
	case st.items == 0 && overrun:
		lw.body.WriteString(`"series":[],"overruns":[`)
		st.overruns = true
	case overrun && !st.overruns:
		lw.body.WriteString(`],"overruns":[`)
		st.overruns = true
	default:
		lw.body.WriteByte(',')
	}
	lw.body.Write(item)
	st.items++
	return nil
}

// flush writes the current line: with more, a part that others follow.
func (st *lineState) flush(more bool) error {
	lw, s := st.lw, st.s
	head := partHead{Version: s.Version, Time: s.Time, WindowNs: s.WindowNs, Host: s.Host, More: more}
	if more || st.parts > 0 {
		head.Part = st.parts + 1
	}
	lw.line.Reset()
	h, err := json.Marshal(head)
	if err != nil {
		return fmt.Errorf("write snapshot: %w", err)
	}
	lw.line.Write(h[:len(h)-1])
	lw.line.WriteByte(',')
	if st.items == 0 {
		// (A snapshot without series has "series":[], not null: the
		// schema wants a list.)
		lw.line.WriteString(`"series":[]`)
	} else {
		lw.line.Write(lw.body.Bytes())
		lw.line.WriteByte(']')
	}
	// The stats are the whole snapshot's: on its last line.
	var stats Stats
	if !more {
		stats = s.Stats
	}
	lw.stats.Reset()
	if err := lw.statEnc.Encode(&stats); err != nil {
		return fmt.Errorf("write snapshot: %w", err)
	}
	lw.line.WriteString(`,"stats":`)
	lw.line.Write(bytes.TrimSuffix(lw.stats.Bytes(), []byte("\n")))
	lw.line.WriteString("}\n")
	if _, err := lw.w.Write(lw.line.Bytes()); err != nil {
		return fmt.Errorf("write snapshot: %w", err)
	}
	st.parts++
	st.items, st.overruns = 0, false
	lw.body.Reset()
	// A buffer grown past twice the bound by one long item is let go.
	for _, b := range []*bytes.Buffer{&lw.body, &lw.line, &lw.item} {
		if b.Cap() > 2*lw.maxLine {
			*b = bytes.Buffer{}
		}
	}
	return nil
}

// A Reader reads snapshots from a stream of JSON values (JSON lines, or
// indented snapshots one after another), joining the parts of a snapshot
// a LineWriter split. A file of --output rotated by size may begin with
// the last parts of a snapshot whose first parts went to an older file,
// and one the agent was stopped writing ends before a snapshot's last
// part: those parts are skipped (Skipped counts them), not errors.
type Reader struct {
	dec     *json.Decoder
	n       int // values read
	started bool
	skipped int
}

// NewReader returns a Reader of r.
func NewReader(r io.Reader) *Reader {
	return &Reader{dec: json.NewDecoder(r)}
}

// Skipped is how many parts of incomplete snapshots, at the start or the
// end of the stream, were skipped.
func (r *Reader) Skipped() int { return r.skipped }

// Next returns the next whole snapshot, io.EOF after the last. A value
// that is not a snapshot, or a part that does not follow the one before
// (a missing part, a part of another snapshot), is an error naming the
// value.
func (r *Reader) Next() (*Snapshot, error) {
	var whole *Snapshot
	parts := 0
	for {
		var raw json.RawMessage
		if err := r.dec.Decode(&raw); errors.Is(err, io.EOF) {
			r.skipped += parts
			return nil, io.EOF
		} else if err != nil {
			return nil, fmt.Errorf("value %d: %w", r.n+1, err)
		}
		r.n++
		s, err := Decode(bytes.NewReader(raw))
		if err != nil {
			return nil, fmt.Errorf("value %d: %w", r.n, err)
		}
		switch {
		case whole == nil && s.Part <= 1:
			r.started = true
			if !s.More {
				s.Part = 0
				return s, nil
			}
			whole, parts = s, 1
			continue
		case whole == nil && !r.started:
			// The tail of a snapshot whose head was rotated away.
			r.skipped++
			continue
		case whole == nil:
			return nil, fmt.Errorf("value %d: part %d of the snapshot of %s without its part 1", r.n, s.Part, s.Time.Format(time.RFC3339Nano))
		case s.Part != whole.Part+1 || !s.Time.Equal(whole.Time):
			return nil, fmt.Errorf("value %d: part %d of the snapshot of %s after part %d of the snapshot of %s", r.n, s.Part, s.Time.Format(time.RFC3339Nano), whole.Part, whole.Time.Format(time.RFC3339Nano))
		}
		whole.Series = append(whole.Series, s.Series...)
		whole.Overruns = append(whole.Overruns, s.Overruns...)
		whole.Part = s.Part
		parts++
		if !s.More {
			whole.Stats = s.Stats
			whole.Part, whole.More = 0, false
			return whole, nil
		}
	}
}
