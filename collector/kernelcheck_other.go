//go:build !(linux && amd64)

package collector

import (
	"context"
	"log/slog"
	"runtime"

	"github.com/spanwatch/spanwatch/internal/kernel"
)

// CheckKernel reports what the kernel offers; the BPF objects are built
// for Linux on x86-64 only, so nothing is loaded here.
func CheckKernel(ctx context.Context, log *slog.Logger) *kernel.Report {
	probes := kernel.Probe()
	core, _ := probes.ChooseCore()
	return kernel.NewReport(kernel.Facts{Probes: probes, Core: core},
		[]kernel.Load{{Object: "BPF objects", Error: "built for linux/amd64, not " + runtime.GOOS + "/" + runtime.GOARCH}})
}
