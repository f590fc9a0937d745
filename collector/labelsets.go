//go:build linux

package collector

import (
	"errors"
	"strconv"
)

// AllocLabelSet gives a source with labels a label set id of its own,
// unique in this collector, and registers ls under it: the series whose
// key has that labelset id name their label values by ls. A source with
// labels allocates its set before attaching.
func (c *Collector) AllocLabelSet(ls LabelSet) (uint16, error) {
	for id := uint16(1); id <= MaxLabelSets; id++ {
		if _, taken := c.reader.labelSets.LoadOrStore(id, ls); !taken {
			return id, nil
		}
	}
	return 0, errors.New("no label set id left: " + strconv.Itoa(MaxLabelSets) + " sources with labels")
}

// FreeLabelSet gives a label set id back.
func (c *Collector) FreeLabelSet(id uint16) { c.reader.labelSets.Delete(id) }
