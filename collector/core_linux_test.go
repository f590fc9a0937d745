//go:build linux

package collector

import (
	"context"
	"encoding/binary"
	"errors"
	"testing"

	"github.com/cilium/ebpf"

	"github.com/spanwatch/spanwatch/bpf"
	"github.com/spanwatch/spanwatch/snapshot"
)

// coreTest drives the aggregation core directly: bpf/coretest.bpf.c, loaded
// beside a collector with its maps, aggregates entries written to its
// input map, through BPF_PROG_TEST_RUN (no probe, no trap).
type coreTest struct {
	c    *Collector
	objs bpf.CoretestObjects
}

func newCoreTest(t testing.TB, cfg Config) *coreTest {
	t.Helper()
	requireBPF(t)
	cfg.Sources = Sources{Marker: true}
	cfg.ScanInterval = -1
	c, err := New(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	spec, err := bpf.LoadCoretest()
	if err != nil {
		t.Fatal(err)
	}
	ct := &coreTest{c: c}
	repl, err := bpf.ShareCore(spec, c.Maps())
	if err != nil {
		t.Fatal(err)
	}
	if err := spec.LoadAndAssign(&ct.objs, &ebpf.CollectionOptions{MapReplacements: repl}); err != nil {
		var verr *ebpf.VerifierError
		if errors.As(err, &verr) {
			t.Fatalf("load coretest: %+v", verr)
		}
		t.Fatalf("load coretest: %v", err)
	}
	t.Cleanup(func() { ct.objs.Close() })
	return ct
}

// entry is one value for the core: a span (duration) or a metric value.
type entry struct {
	name     string
	cgroup   uint64
	value    uint64
	labels   [3]uint64
	labelset uint16
	metric   bool
	error    bool
}

// put writes entries at input index first..; the name is copied raw into
// the 128-byte field (a longer name fills it, as a payload would).
func (ct *coreTest) put(t testing.TB, first int, es []entry) {
	t.Helper()
	keys := make([]uint32, len(es))
	vals := make([]bpf.CoretestCoretestIn, len(es))
	for i, e := range es {
		keys[i] = uint32(first + i)
		v := &vals[i]
		for j := 0; j < len(e.name) && j < len(v.Name); j++ {
			v.Name[j] = int8(e.name[j])
		}
		v.CgroupId, v.Value, v.Labels, v.Labelset = e.cgroup, e.value, e.labels, e.labelset
		if e.metric {
			v.Kind = kindMetric
		}
		if e.error {
			v.Error = 1
		}
	}
	if _, err := ct.objs.CoretestInput.BatchUpdate(keys, vals, nil); err != nil {
		t.Fatalf("write coretest input: %v", err)
	}
}

// run aggregates entries [first, first+n), repeat times over.
func (ct *coreTest) run(t testing.TB, first, n, repeat int) {
	t.Helper()
	ctx := make([]byte, 3*8)
	binary.LittleEndian.PutUint64(ctx[0:], uint64(first))
	binary.LittleEndian.PutUint64(ctx[8:], uint64(n))
	binary.LittleEndian.PutUint64(ctx[16:], uint64(repeat))
	if _, err := ct.objs.CoretestRun.Run(&ebpf.RunOptions{Context: ctx}); err != nil {
		t.Fatalf("run coretest: %v", err)
	}
}

// aggregate writes and aggregates entries once each.
func (ct *coreTest) aggregate(t testing.TB, es []entry) {
	t.Helper()
	for off := 0; off < len(es); off += 1 << 16 {
		end := min(off+1<<16, len(es))
		ct.put(t, 0, es[off:end])
		ct.run(t, 0, end-off, 1)
	}
}

// indexes returns the kernel's bucket index of each value.
func (ct *coreTest) indexes(t testing.TB, vals []uint64, metric bool) []int32 {
	t.Helper()
	keys := make([]uint32, len(vals))
	for i := range keys {
		keys[i] = uint32(i)
	}
	if _, err := ct.objs.CoretestVals.BatchUpdate(keys, vals, nil); err != nil {
		t.Fatal(err)
	}
	ctx := make([]byte, 16)
	binary.LittleEndian.PutUint64(ctx[0:], uint64(len(vals)))
	if metric {
		binary.LittleEndian.PutUint64(ctx[8:], 1)
	}
	if _, err := ct.objs.CoretestIndex.Run(&ebpf.RunOptions{Context: ctx}); err != nil {
		t.Fatal(err)
	}
	out := make([]int64, len(vals))
	var cursor ebpf.MapBatchCursor
	got := make([]int32, 0, len(vals))
	okeys := make([]uint32, len(vals))
	n, err := ct.objs.CoretestIdx.BatchLookup(&cursor, okeys, out, nil)
	if err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
		t.Fatal(err)
	}
	for i := 0; i < n && i < len(vals); i++ {
		got = append(got, int32(out[i]))
	}
	return got
}

// snapshotOf takes a snapshot and indexes its series with counts by name.
func (ct *coreTest) snapshot(t testing.TB) (*snapshot.Snapshot, map[string]snapshot.Series) {
	t.Helper()
	s, err := ct.c.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	return s, seriesByName(s)
}
