//go:build linux

package agent

import (
	"testing"

	"github.com/spanwatch/spanwatch/collector"
)

// TestLimitsMatchCollector keeps the collector: section's bounds, which
// check applies on any system, equal to those the collector exports and
// enforces when it sizes the kernel's maps.
func TestLimitsMatchCollector(t *testing.T) {
	if MaxMaxSeries != collector.MaxSeriesLimit {
		t.Errorf("MaxMaxSeries %d, collector.MaxSeriesLimit %d", MaxMaxSeries, collector.MaxSeriesLimit)
	}
	if checkMaxSeries(collector.DefaultMaxSeries) != nil || checkSeriesQuota(collector.DefaultSeriesQuota) != nil || checkHistogramCells(collector.DefaultHistogramCells) != nil {
		t.Error("the collector's defaults are out of check's bounds")
	}
}
