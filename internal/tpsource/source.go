package tpsource

import (
	"fmt"
	"strings"

	"github.com/spanwatch/spanwatch/config/section"
	"github.com/spanwatch/spanwatch/internal/srcspec"
)

// A Kind is the kind of a tracepoint source.
type Kind string

const (
	// UserEvents is a user_event with a fixed struct payload.
	UserEvents Kind = "user_events"
	// EventHeader is an EventHeader tracepoint of a provider.
	EventHeader Kind = "eventheader"
)

// A Field names a field: one name for a user_event (its format's field),
// a path of struct names then the field's name for an EventHeader event
// ("PartB", "name").
type Field []string

func (f Field) String() string { return strings.Join(f, ".") }

// IsZero reports whether no field is named.
func (f Field) IsZero() bool { return len(f) == 0 }

// A Source makes spans from user_events tracepoints.
type Source struct {
	Kind Kind

	// Event is the one event of a single-event source: a user_event name,
	// or an EventHeader event name. Start and End name the two events of
	// a pair. An EventHeader source with none of them takes the
	// provider's Span events (SpanEvents).
	Event      string
	Start, End string

	// Provider, Level and Keyword select EventHeader tracepoints:
	// PROVIDER_L<level>K<keyword>. Level 0 takes every level; otherwise
	// tracepoints of that level and below (more severe). Keyword 0 takes
	// every keyword; otherwise tracepoints whose keyword shares a bit
	// with it.
	Provider string
	Level    uint8
	Keyword  uint64

	// Span is the span name, or NameField names a string field (a
	// char[N], __data_loc or __rel_loc char[] of a user_event; a string of
	// an EventHeader event). In a pair the name is read at the start
	// event, or at the end event when only it has the field.
	Span      string
	NameField Field
	// DurationField holds a single event's duration in nanoseconds; a
	// pair is timed in the kernel from start to end.
	DurationField Field
	// KeyField pairs start and end by a field present in both (a request
	// id) instead of by thread.
	KeyField Field
	// StatusField is a field (of the single event, or of the end event)
	// whose nonzero value marks the span as an error.
	StatusField Field

	// Metric makes the single event feed a value series of this name
	// instead of a span: ValueField is an integer field whose values
	// (signed when the field is) are counted, summed, and kept in a
	// histogram with their minimum and maximum.
	Metric     string
	ValueField Field

	// Error is a predicate over fields (of the single event, or of the
	// end event of a pair) that marks the span or value as an error:
	// "status >= 500". Labels take label values from fields, at most
	// Labels.Cap distinct values each. Their operands are Operands[i].
	Error    *srcspec.Predicate
	Labels   srcspec.Labels
	Operands []Field

	// Pos is where the source is declared.
	Pos section.Pos
}

// IsMetric reports whether the source feeds a metric series.
func (s *Source) IsMetric() bool { return s.Metric != "" }

// SpanEvents reports whether the source takes an EventHeader provider's
// OpenTelemetry Span events (no event named, no fields mapped).
func (s *Source) SpanEvents() bool {
	return s.Kind == EventHeader && s.Event == "" && s.Start == ""
}

// Paired reports whether the source pairs a start and an end event.
func (s *Source) Paired() bool { return s.Start != "" }

// Describe names the source for logs and errors.
func (s *Source) Describe() string {
	var what string
	switch {
	case s.SpanEvents():
		what = "Span events"
	case s.Paired():
		what = fmt.Sprintf("%s..%s", s.Start, s.End)
	default:
		what = s.Event
	}
	name := s.Span
	if name == "" && !s.NameField.IsZero() {
		name = "name_field " + s.NameField.String()
	}
	if s.IsMetric() {
		if s.Kind == EventHeader {
			return fmt.Sprintf("eventheader metric %s (%s of %s)", s.Metric, what, s.Provider)
		}
		return fmt.Sprintf("user_events metric %s (%s)", s.Metric, what)
	}
	if s.Kind == EventHeader {
		sel := s.Provider
		if s.Level != 0 {
			sel += fmt.Sprintf(" level<=%d", s.Level)
		}
		if s.Keyword != 0 {
			sel += fmt.Sprintf(" keyword&%#x", s.Keyword)
		}
		if name == "" {
			return fmt.Sprintf("eventheader %s (%s)", what, sel)
		}
		return fmt.Sprintf("eventheader span %s (%s of %s)", name, what, sel)
	}
	return fmt.Sprintf("user_events span %s (%s)", name, what)
}

// Events returns the event names the source needs.
func (s *Source) Events() []string {
	if s.Paired() {
		return []string{s.Start, s.End}
	}
	if s.Event != "" {
		return []string{s.Event}
	}
	return nil
}
