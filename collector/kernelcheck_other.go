//go:build !linux

package collector

import (
	"context"
	"log/slog"
	"runtime"

	"github.com/spanwatch/spanwatch/internal/kernel"
)

// CheckKernel reports what the kernel offers; BPF needs Linux, so
// nothing is loaded here. (On Linux, an architecture the BPF objects are
// not built for is refused by New, and the report says so.)
func CheckKernel(ctx context.Context, log *slog.Logger) *kernel.Report {
	probes := kernel.Probe()
	core, _ := probes.ChooseCore()
	return kernel.NewReport(kernel.Facts{Probes: probes, Core: core},
		[]kernel.Load{{Object: "BPF objects", Error: "built for linux/amd64 and linux/arm64, not " + runtime.GOOS + "/" + runtime.GOARCH}})
}
