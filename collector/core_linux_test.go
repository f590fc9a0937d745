//go:build linux

package collector

import (
	"context"
	"testing"

	"github.com/spanwatch/spanwatch/internal/bpftest"
	"github.com/spanwatch/spanwatch/internal/cgroup"
	"github.com/spanwatch/spanwatch/internal/coretest"
	"github.com/spanwatch/spanwatch/internal/kernel"
	"github.com/spanwatch/spanwatch/snapshot"
)

// coreTest drives the aggregation core directly (internal/coretest).
type coreTest struct {
	c    *Collector
	core *coretest.Core
}

type entry = coretest.Entry

// forEachCore runs f on each core the kernel can load: the full objects
// (BPF atomics, bpf_loop; failing where the kernel's release should have
// them) and the compat ones, which run on every kernel from 5.10.
func forEachCore(t *testing.T, f func(*testing.T, kernel.Core)) {
	t.Run("full", func(t *testing.T) {
		bpftest.Require(t, kernel.Atomics, kernel.Loop)
		f(t, kernel.CoreFull)
	})
	t.Run("compat", func(t *testing.T) { f(t, kernel.CoreCompat) })
}

// perCgroupQuota resolves cgroups but tells no workloads (it is not a
// workloadSource): the series quota stays per cgroup id.
type perCgroupQuota struct{ CgroupResolver }

func newCoreTest(t testing.TB, cfg Config) *coreTest {
	t.Helper()
	requireBPF(t)
	cfg.Sources = Sources{Marker: true}
	cfg.ScanInterval = -1
	if cfg.Resolver == nil {
		// The core tests use made-up cgroup ids, which may be real
		// cgroups' too: keep the quota per cgroup id, with no
		// workloads of the host's cgroups.
		if r, err := cgroup.NewResolver(cgroup.Config{}); err == nil {
			cfg.Resolver = perCgroupQuota{r}
		}
	}
	c, err := New(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	core, err := coretest.Load(c.Maps(), c.Kernel().Core == kernel.CoreCompat)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { core.Close() })
	return &coreTest{c: c, core: core}
}

func (ct *coreTest) put(t testing.TB, first int, es []entry) {
	t.Helper()
	if err := ct.core.Put(first, es); err != nil {
		t.Fatal(err)
	}
}

func (ct *coreTest) run(t testing.TB, first, n, repeat int) {
	t.Helper()
	if err := ct.core.Run(first, n, repeat); err != nil {
		t.Fatal(err)
	}
}

func (ct *coreTest) aggregate(t testing.TB, es []entry) {
	t.Helper()
	if err := ct.core.Aggregate(es); err != nil {
		t.Fatal(err)
	}
}

func (ct *coreTest) indexes(t testing.TB, vals []uint64, metric bool) []int32 {
	t.Helper()
	got, err := ct.core.Indexes(vals, metric)
	if err != nil {
		t.Fatal(err)
	}
	return got
}

// snapshot takes a snapshot and indexes its series with counts by name.
func (ct *coreTest) snapshot(t testing.TB) (*snapshot.Snapshot, map[string]snapshot.Series) {
	t.Helper()
	s, err := ct.c.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	return s, seriesByName(s)
}
