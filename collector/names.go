//go:build linux

package collector

import (
	"sort"
	"strings"
	"time"

	"github.com/spanwatch/spanwatch/snapshot"
)

// A NameResolver turns a name a source could not read in the kernel (a
// placeholder it counted the spans under) into the real name, reporting
// false for names that are not its placeholders. The USDT tracer's
// ResolveName is one.
type NameResolver func(name string) (string, bool)

// nameResolvers are the resolvers of a reader, swapped whole.
type nameResolvers struct {
	list []NameResolver
}

// AddNameResolver makes snapshots and overruns report the series and spans
// of a source's placeholder names under the names the resolver gives;
// series that end up with the same name, cgroup and labels are merged
// into one.
func (c *Collector) AddNameResolver(f NameResolver) {
	r := c.reader
	for {
		old := r.resolvers.Load()
		nr := &nameResolvers{}
		if old != nil {
			nr.list = append(nr.list, old.list...)
		}
		nr.list = append(nr.list, f)
		if r.resolvers.CompareAndSwap(old, nr) {
			return
		}
	}
}

// resolveName applies the resolvers to a name read from the kernel.
func (r *seriesReader) resolveName(name string) (string, bool) {
	rs := r.resolvers.Load()
	if rs == nil {
		return name, false
	}
	for _, f := range rs.list {
		if n, ok := f(name); ok {
			return n, true
		}
	}
	return name, false
}

// seriesID is what tells series apart in a snapshot.
func seriesID(s *snapshot.Series) string {
	var b strings.Builder
	b.WriteString(s.Kind)
	b.WriteByte(0)
	b.WriteString(s.Span)
	b.WriteByte(0)
	b.WriteString(snapshotUint(s.CgroupID))
	b.WriteByte(0)
	b.WriteString(s.Process)
	b.WriteByte(0)
	b.WriteString(s.Service)
	keys := make([]string, 0, len(s.SourceLabels))
	for k := range s.SourceLabels {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		b.WriteByte(0)
		b.WriteString(k)
		b.WriteByte('=')
		b.WriteString(s.SourceLabels[k])
	}
	return b.String()
}

func snapshotUint(v uint64) string {
	var buf [20]byte
	i := len(buf)
	for {
		i--
		buf[i] = byte('0' + v%10)
		v /= 10
		if v == 0 {
			return string(buf[i:])
		}
	}
}

// mergeSeries merges series with the same kind, name, cgroup, process,
// service and labels (a placeholder's series and its real name's, once
// resolved; two processes of one executable in a split cgroup) as
// snapshot.Accumulator combines series: counts and sums add, extremes
// combine, histograms merge bucket by bucket and the quantiles are taken
// again from the merged histogram. Only series twin says can have twins
// are looked at (those with a name resolvers gave, or of a split cgroup).
func mergeSeries(series []snapshot.Series, window time.Duration, twin func(*snapshot.Series) bool) []snapshot.Series {
	index := map[string]int{}
	out := series[:0]
	var acc snapshot.Accumulator
	for i := range series {
		s := series[i]
		if !twin(&s) {
			out = append(out, s)
			continue
		}
		id := seriesID(&s)
		j, ok := index[id]
		if !ok {
			index[id] = len(out)
			out = append(out, s)
			continue
		}
		mergeInto(&acc, &out[j], &s, window)
	}
	return out
}

func mergeInto(acc *snapshot.Accumulator, d, s *snapshot.Series, window time.Duration) {
	if s.Count == 0 {
		return
	}
	if snapshot.NameID(d.Span) != d.NameID {
		d.NameID = s.NameID // keep the real name's id when one of them has it
	}
	if !d.IsMetric() {
		d.BudgetNs = max(d.BudgetNs, s.BudgetNs)
	}
	acc.Reset(d.IsMetric())
	acc.Add(d)
	acc.Add(s)
	acc.Into(d, window)
	d.Histogram = acc.Histogram()
}
