//go:build linux && !amd64

package collector

import (
	"context"
	"errors"
	"runtime"

	"github.com/spanwatch/spanwatch/internal/tpsource"
)

// Tracepoints are the span sources on user_events tracepoints; their BPF
// objects are built for amd64 only.
type Tracepoints struct{}

// AttachTracepoints reports that this architecture has no BPF objects
// for tracepoint sources.
func (c *Collector) AttachTracepoints(context.Context, []tpsource.Source, TracepointConfig) (*Tracepoints, error) {
	return nil, errors.New("user_events and eventheader sources: the BPF objects are built for amd64 only, not " + runtime.GOARCH)
}

// Kind is "tracepoints".
func (t *Tracepoints) Kind() string { return "tracepoints" }

// Close does nothing.
func (t *Tracepoints) Close() error { return nil }

// Status reports nothing.
func (t *Tracepoints) Status() []TracepointStatus { return nil }

// Counts reports nothing.
func (t *Tracepoints) Counts() (map[string]uint64, error) { return nil, nil }

// CPUGaps reports nothing.
func (t *Tracepoints) CPUGaps() uint64 { return 0 }
