//go:build linux

package deploy

import (
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/spanwatch/spanwatch/collector"
	"github.com/spanwatch/spanwatch/config"
	"github.com/spanwatch/spanwatch/internal/kernel"
	"github.com/spanwatch/spanwatch/internal/memory"
	"github.com/spanwatch/spanwatch/policy"
)

// DaemonSetSeries is the series capacity the DaemonSet's memory limit
// gives the agent under its own rules (docs/memory.md, deploy/README.md).
const DaemonSetSeries = 25000

// TestManifestMemory holds the DaemonSet's memory to what was measured
// (BENCHMARKS.md, "Memory budget" and "Idle footprint"): its limit is the
// agent's budget (90% of it), which must hold DaemonSetSeries series under
// the ConfigMap's rules; its request must cover the agent idle at that
// budget where its BPF maps grow with use (the cell banks with the full
// objects, Linux 5.17+; the hashes keyed by series from 6.1: 50 MiB
// measured on 6.18) and stay within the limit. Before 6.1 more of the
// maps are allocated whole at load (up to the plan's full figure, well
// within the limit): the request is what a node's scheduler should count
// on, not a bound.
func TestManifestMemory(t *testing.T) {
	m := loadManifest(t)
	rules, err := policy.Parse("rules.yaml", []byte(m.cm.Data["rules.yaml"]), policy.Options{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	c := m.ds.Spec.Template.Spec.Containers[0]
	limit := c.Resources.Limits[corev1.ResourceMemory]
	request := c.Resources.Requests[corev1.ResourceMemory]
	b := memory.Budget{Bytes: uint64(limit.Value()) / 100 * memory.CgroupShare, Source: memory.SourceCgroup, Detail: "the DaemonSet's limit"}
	p, err := memory.NewPlan(b, memory.Inputs{
		Interval: config.DefaultInterval, LongestRange: rules.LongestRange(), Binary: config.BinaryBytes,
		KernelBytes: func(series, cells uint32) (uint64, error) {
			return collector.EstimateMapBytes(collector.Config{MaxSeries: series, HistogramCells: cells})
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	if p.MaxSeries < DaemonSetSeries {
		t.Errorf("limits.memory %s: the budget holds %d series, want at least %d", limit.String(), p.MaxSeries, DaemonSetSeries)
	}
	grown, err := collector.EstimateIdleMapBytes(collector.Config{MaxSeries: p.MaxSeries, HistogramCells: p.HistogramCells, Core: kernel.CoreFull})
	if err != nil {
		t.Fatal(err)
	}
	idle := grown + config.BinaryBytes + memory.IdleBytes
	if !collector.GrowsWithUse(kernel.CoreFull, kernel.Probe().Release) {
		// The hashes preallocated here: the request is held to the
		// kernels where they grow.
		t.Logf("kernel %s: the hashes keyed by series are preallocated here; idle %s", kernel.Probe().Release, memory.FormatBytes(idle))
		idle = 0
	}
	if uint64(request.Value()) < idle || request.Cmp(limit) > 0 {
		t.Errorf("requests.memory %s: want at least the agent idle at this budget, %s, and at most the limit %s", request.String(), memory.FormatBytes(idle), limit.String())
	}
	t.Logf("limit %s: budget %s, %d series, BPF maps %s (%s idle on this kernel with the full objects); idle %s, request %s",
		limit.String(), memory.FormatBytes(b.Bytes), p.MaxSeries, memory.FormatBytes(p.KernelBytes), memory.FormatBytes(grown), memory.FormatBytes(idle), request.String())
}
