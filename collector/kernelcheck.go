//go:build linux

package collector

import (
	"context"
	"log/slog"

	usdtsource "github.com/spanwatch/spanwatch/source/usdt"

	"github.com/spanwatch/spanwatch/internal/kernel"
)

// CheckKernel probes the running kernel and loads every BPF object of
// spanwatch on it, as the agent would (small maps, nothing attached): the
// core the probes choose (and the compat one should the verifier refuse
// it), the USDT object and the in-flight samplers. It returns the report
// `spanwatch kernel` prints; a load that fails is in its Loads, with the
// verifier's log of a refusal. It needs CAP_BPF and CAP_PERFMON (or root).
func CheckKernel(ctx context.Context, log *slog.Logger) *kernel.Report {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	probes := kernel.Probe()
	c, err := New(ctx, Config{Logger: log, Sources: Sources{Marker: true}, ScanInterval: -1,
		MaxSeries: 64, HistogramCells: 512, RingbufBytes: 1 << 16})
	if err != nil {
		core, _ := probes.ChooseCore()
		return kernel.NewReport(kernel.Facts{Probes: probes, Core: core}, []kernel.Load{loadOf(string(core)+" core", err)})
	}
	defer c.Close()
	facts := c.Kernel()
	loads := []kernel.Load{{Object: string(facts.Core) + " core", Loaded: true}}
	if facts.CoreFallback != nil {
		loads = append([]kernel.Load{loadOf("full core", facts.CoreFallback)}, loads...)
	}
	tr, err := usdtsource.Attach(ctx, c.SourceCore(), nil)
	loads = append(loads, loadOf(string(facts.Core)+" usdt", err))
	if err == nil {
		tr.Close()
	}
	loads = append(loads, loadOf("in-flight samplers", c.inflightErr))
	return kernel.NewReport(facts, loads)
}

func loadOf(object string, err error) kernel.Load {
	if err == nil {
		return kernel.Load{Object: object, Loaded: true}
	}
	return kernel.Load{Object: object, Error: err.Error(), Log: kernel.VerifierLog(err)}
}
