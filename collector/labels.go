//go:build linux

package collector

import "fmt"

// maxLabelSet is the largest label set id: bpf/source.h keeps per-label
// counters for SRC_LABELSETS ids.
const maxLabelSet = 4095

// AllocLabelSet registers the label names of one source and returns the
// id its series keys carry (struct series_key.labelset), unique among the
// sources of this collector, whatever object they are loaded from.
func (c *Collector) AllocLabelSet(ls LabelSet) (uint16, error) {
	if len(ls.Names) == 0 || len(ls.Names) > seriesLabels {
		return 0, fmt.Errorf("a label set has 1 to %d labels, not %d", seriesLabels, len(ls.Names))
	}
	for id := uint16(1); id <= maxLabelSet; id++ {
		if _, taken := c.reader.labelSets.LoadOrStore(id, ls); !taken {
			return id, nil
		}
	}
	return 0, fmt.Errorf("more than %d label sets", maxLabelSet)
}
