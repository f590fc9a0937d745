//go:build linux

package config

import (
	"fmt"

	"github.com/spanwatch/spanwatch/collector"
)

// mapEstimate estimates the BPF maps' memory for a series capacity and
// histogram cells, with the other sizes the settings give
// (collector.EstimateMapBytes).
func mapEstimate(s CollectorSettings) func(series, cells uint32) (uint64, error) {
	return func(series, cells uint32) (uint64, error) {
		n, err := collector.EstimateMapBytes(collector.Config{MaxSeries: series, HistogramCells: cells, RingbufBytes: s.RingbufBytes})
		if err != nil {
			return 0, fmt.Errorf("%w: %w", errKernelEstimate, err)
		}
		return n, nil
	}
}
