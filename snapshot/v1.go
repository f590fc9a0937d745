package snapshot

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"time"
)

// The version 1 JSON form, as recorded snapshots and rule unit tests may
// still hold it: log-linear buckets ([low_ns, high_ns), 8 per power of
// two), max_ns the series' running maximum and window_max_ns the window's.
type snapshotV1 struct {
	Version  int        `json:"version"`
	Time     time.Time  `json:"time"`
	WindowNs int64      `json:"window_ns"`
	Host     string     `json:"host,omitempty"`
	Series   []seriesV1 `json:"series"`
	Overruns []Overrun  `json:"overruns,omitempty"`
	Stats    Stats      `json:"stats"`
}

type seriesV1 struct {
	Span        string     `json:"span"`
	NameID      uint64     `json:"name_id,omitempty"`
	CgroupID    uint64     `json:"cgroup_id"`
	Cgroup      string     `json:"cgroup,omitempty"`
	Container   string     `json:"container,omitempty"`
	Pod         string     `json:"pod,omitempty"`
	Unit        string     `json:"unit,omitempty"`
	Process     string     `json:"process,omitempty"`
	Count       uint64     `json:"count"`
	Rate        float64    `json:"rate"`
	Errors      uint64     `json:"errors"`
	ErrorRatio  float64    `json:"error_ratio"`
	SumNs       uint64     `json:"sum_ns"`
	P50Ns       uint64     `json:"p50_ns"`
	P90Ns       uint64     `json:"p90_ns"`
	P99Ns       uint64     `json:"p99_ns"`
	MaxNs       uint64     `json:"max_ns"`
	WindowMaxNs uint64     `json:"window_max_ns"`
	OverBudget  uint64     `json:"over_budget"`
	BudgetNs    uint64     `json:"budget_ns,omitempty"`
	Histogram   []bucketV1 `json:"histogram,omitempty"`
}

type bucketV1 struct {
	LowNs  uint64 `json:"low_ns"`
	HighNs uint64 `json:"high_ns"`
	Count  uint64 `json:"count"`
}

// decodeV1 reads a version 1 snapshot into the version 2 model. Counts and
// quantiles carry over as they are; max_ns becomes the window's maximum
// (window_max_ns, the histogram's estimate, when it was set); min_ns is
// left 0 (version 1 had none); each log-linear bucket's count goes to the
// schema-6 bucket of its midpoint, which is the one approximation (a v1
// bucket is 12.5% wide and spans several schema-6 buckets).
func decodeV1(data []byte) (*Snapshot, error) {
	var v snapshotV1
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&v); err != nil {
		return nil, fmt.Errorf("decode snapshot (version 1): %w", err)
	}
	s := &Snapshot{Version: Version, Time: v.Time, WindowNs: v.WindowNs, Host: v.Host, Overruns: v.Overruns, Stats: v.Stats, Series: make([]Series, len(v.Series))}
	for i, o := range v.Series {
		n := Series{
			Span: o.Span, NameID: o.NameID, CgroupID: o.CgroupID,
			Identity: Identity{Cgroup: o.Cgroup, ContainerID: o.Container, PodUID: o.Pod, Unit: o.Unit, Process: o.Process},
			Count:    o.Count, Rate: o.Rate, Errors: o.Errors, ErrorRatio: o.ErrorRatio, SumNs: o.SumNs,
			P50Ns: o.P50Ns, P90Ns: o.P90Ns, P99Ns: o.P99Ns, MaxNs: o.MaxNs, OverBudget: o.OverBudget, BudgetNs: o.BudgetNs,
		}
		if o.WindowMaxNs != 0 {
			n.MaxNs = o.WindowMaxNs
		}
		for _, b := range o.Histogram {
			mid := uint64(math.Sqrt(float64(b.LowNs) * float64(max(b.HighNs, 1)-1)))
			n.Histogram = MergeHistogram(n.Histogram, []Bucket{DurationBucket(mid, b.Count)})
		}
		s.Series[i] = n
	}
	// Version 1's container and pod were the ids the cgroup path names.
	for i := range s.Overruns {
		o := &s.Overruns[i]
		o.ContainerID, o.PodUID, o.Container, o.Pod = o.Container, o.Pod, "", ""
	}
	return s, nil
}
