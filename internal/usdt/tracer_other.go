//go:build !(linux && (amd64 || arm64))

package usdt

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/cilium/ebpf"

	"github.com/spanwatch/spanwatch/internal/kernel"
)

// ErrUnsupported: attaching USDT probes needs Linux on x86-64 or arm64
// (the BPF object is built for them); listing probes works everywhere.
var ErrUnsupported = errors.New("attaching USDT probes is only supported on linux/amd64 and linux/arm64")

// TracerConfig configures a Tracer.
type TracerConfig struct {
	Logger        *slog.Logger
	Maps          map[string]*ebpf.Map
	NoCookies     bool
	NoSleepable   bool
	NoStrKfunc    bool
	LabelSet      func(names []string, signed []bool) (uint16, error)
	MaxSpecs      uint32
	ProcRoot      string
	OptimizeNop5  bool
	NoUprobeMulti bool
	Core          kernel.Core
}

// Stats are the tracer's counts; here always zero.
type Stats struct {
	Unpaired, NestOverflow, NameFallback, NameCached, NameReqDrops, NoStorage, NameFailures uint64
	LabelOther, LabelFull, LabelUnread                                                      uint64
}

// A Tracer attaches USDT span sources; here it cannot.
type Tracer struct{}

// A Site is one attached call site.
type Site struct {
	SpecID uint32
	Path   string
	PID    int
	Probe  Probe
	Role   string
}

// NewTracer fails with ErrUnsupported on this platform.
func NewTracer(cfg TracerConfig) (*Tracer, error) { return nil, ErrUnsupported }

func (t *Tracer) HaveCookie() bool                            { return false }
func (t *Tracer) UprobeMethod() string                        { return "" }
func (t *Tracer) Sites() []Site                               { return nil }
func (t *Tracer) Map(name string) *ebpf.Map                   { return nil }
func (t *Tracer) Program(name string) *ebpf.Program           { return nil }
func (t *Tracer) Add(ctx context.Context, s SpanSource) error { return ErrUnsupported }
func (t *Tracer) Close() error                                { return nil }
func (t *Tracer) NameMethod() string                          { return "" }
func (t *Tracer) ResolveName(name string) (string, bool)      { return name, false }
func (t *Tracer) Stats() (Stats, error)                       { return Stats{}, ErrUnsupported }

// SourceHits is what the probes of one source did; here nothing.
type SourceHits struct {
	Source SpanSource
	Sites  int
	Since  time.Time
	Hits   uint64

	Unpaired, NestOverflow uint64
}

func (t *Tracer) Hits() ([]SourceHits, error) { return nil, ErrUnsupported }
