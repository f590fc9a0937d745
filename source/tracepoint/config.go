//go:build linux

package tracepoint

import "time"

// Config configures Attach.
type Config struct {
	// DiscoverInterval is how often tracefs is listed for events that
	// appeared (default 1s): an event registered after the agent started
	// is picked up within it.
	DiscoverInterval time.Duration
	// MissingAfter is how long a source may wait for its events before it
	// is reported as missing, once (default 30s). It keeps waiting.
	MissingAfter time.Duration
	// TracefsDir is where tracefs is mounted; default: found or mounted
	// by userevents.TracefsDir.
	TracefsDir string

	// test loads the test programs of the objects and attaches nothing.
	test bool
}

// Status is what became of one source.
type Status struct {
	Source string
	Pos    string
	// Tracepoints are those the source reads now.
	Tracepoints []string
	// Problems say why an event of the source could not be read, by
	// tracepoint.
	Problems map[string]string
}
