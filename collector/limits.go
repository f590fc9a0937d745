package collector

import (
	"fmt"
	"math/bits"
	"os"
	"sync"
	"time"

	"github.com/spanwatch/spanwatch/bpf"
	"github.com/spanwatch/spanwatch/collector/overrun"
	"github.com/spanwatch/spanwatch/internal/srcspec"
)

// This file builds on every system: the limits of Config's sizes, checked
// by New and, through config.Load, by spanwatch check, with the same
// functions.

// DefaultOverrunQueue is how many overrun records wait between the ring
// buffer reader and the worker when Config.OverrunQueue is 0: about 1.8 MB
// of records at most, half the default ring buffer's.
const DefaultOverrunQueue = overrun.DefaultQueue

// Defaults and limits of Config's sizes.
const (
	DefaultMaxSeries = 131072
	MinMaxSeries     = 64
	// MaxSeriesLimit: a series' slot + 1 must fit the 18 bits of a
	// histogram cell's key (CELL_SLOT_MAX).
	MaxSeriesLimit        = uint32(bpf.SpanwatchCoreSizesCELL_SLOT_MAX) + 1
	DefaultHistogramCells = 1 << 24
	MinHistogramCells     = 512
	MaxHistogramCells     = 1 << 28
	DefaultSeriesQuota    = 8192
	// The compat core's histogram cells (kernel.CoreCompat, kernels 5.10
	// to 5.16): a hash of about 80 bytes an entry where the full core has
	// an 8-byte cell, so fewer by default, and at most
	// MaxCompatHistogramCells whatever HistogramCells says.
	DefaultCompatHistogramCells = 1 << 18
	MaxCompatHistogramCells     = 1 << 22
	// MaxRingbufBytes bounds RingbufBytes: the kernel accepts up to 2 GiB,
	// all of it locked kernel memory.
	MaxRingbufBytes = 1 << 30
	// MaxOverrunQueue bounds OverrunQueue: each queued record takes about
	// 1.8 KB of the agent's memory.
	MaxOverrunQueue = 1 << 20
	// DefaultScanInterval is how often /proc is scanned for binaries with
	// the marker when Config.ScanInterval is 0.
	DefaultScanInterval = 2 * time.Second
	// MaxLabelSets is how many sources with labels (USDT and tracepoint
	// sources together) one collector holds: label set ids 1..4095
	// (SRC_LABELSETS - 1 in bpf/source.h).
	MaxLabelSets = srcspec.MaxLabelSet
)

// DefaultRingbufBytes is the overrun ring buffer's size when
// Config.RingbufBytes is 0: the size the BPF object declares (0 if the
// object cannot be read).
var DefaultRingbufBytes = sync.OnceValue(func() uint32 {
	spec, err := bpf.LoadSpanwatch()
	if err != nil || spec.Maps["overruns"] == nil {
		return 0
	}
	return spec.Maps["overruns"].MaxEntries
})

// CheckMaxSeries validates a MaxSeries other than 0 (the default).
func CheckMaxSeries(n int64) error {
	if n < MinMaxSeries || n > int64(MaxSeriesLimit) {
		return fmt.Errorf("%d is out of range: want %d to %d (leave it out for the default, %d)", n, MinMaxSeries, MaxSeriesLimit, DefaultMaxSeries)
	}
	return nil
}

// CheckHistogramCells validates a HistogramCells other than 0.
func CheckHistogramCells(n int64) error {
	if n < MinHistogramCells || n > MaxHistogramCells {
		return fmt.Errorf("%d is out of range: want %d to %d (rounded up to a power of two; leave it out for the default, 2^24)", n, MinHistogramCells, MaxHistogramCells)
	}
	return nil
}

// CheckSeriesQuota validates a SeriesQuota other than 0.
func CheckSeriesQuota(n int64) error {
	if n < 1 || n > int64(MaxSeriesLimit) {
		return fmt.Errorf("%d is out of range: want 1 to %d series per cgroup (leave it out for the default, %d)", n, MaxSeriesLimit, DefaultSeriesQuota)
	}
	return nil
}

// CheckRingbufBytes applies the kernel's rules for a BPF ring buffer to a
// RingbufBytes other than 0: a power of two and a multiple of the page
// size (else map creation fails with EINVAL), and a sane bound.
func CheckRingbufBytes(n int64) error {
	page := int64(os.Getpagesize())
	switch {
	case n < page:
		return fmt.Errorf("%d is less than a page (%d bytes)", n, page)
	case n > MaxRingbufBytes:
		return fmt.Errorf("%d is more than %d (1 GiB of locked kernel memory)", n, MaxRingbufBytes)
	case bits.OnesCount64(uint64(n)) != 1 || n%page != 0:
		// A power of two at least a page long is a multiple of it: page
		// sizes are powers of two.
		return fmt.Errorf("%d is not a power of two: the kernel wants a power of two and a multiple of the page size (%d), e.g. %d", n, page, uint64(1)<<bits.Len64(uint64(n)))
	}
	return nil
}

// CheckOverrunQueue validates an OverrunQueue other than 0.
func CheckOverrunQueue(n int64) error {
	switch {
	case n < 1:
		return fmt.Errorf("must be at least 1, not %d", n)
	case n > MaxOverrunQueue:
		return fmt.Errorf("%d is more than %d (about 1.8 KB of memory each)", n, MaxOverrunQueue)
	}
	return nil
}
