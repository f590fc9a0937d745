package inflight

import "github.com/spanwatch/spanwatch/bpf"

// Bits of an overrun record's status (struct overrun, bpf/aggregate.h)
// that the in-flight samplers set; the span's error flag is bit 0. They
// are enum overrun_status in bpf/inflight.h, generated.
const (
	// StatusStillRunning marks a sample of a span that had not ended: the
	// collector sets snapshot.Overrun.StillRunning from it, and must test
	// the error bit (status & 1) rather than status != 0.
	StatusStillRunning = uint32(bpf.InflightOverrunStatusOVERRUN_STILL_RUNNING)
	// StatusOffCPU marks a sample taken while the thread was off the CPU
	// (going off it at sched_switch, or found blocked by the iterator),
	// or of a goroutine the Go scheduler had parked.
	StatusOffCPU = uint32(bpf.InflightOverrunStatusOVERRUN_OFF_CPU)
)

// DecodeStatus splits an overrun record's status into the span's error
// flag and whether it was sampled still running.
func DecodeStatus(status uint32) (spanError, stillRunning bool) {
	return status&^(StatusStillRunning|StatusOffCPU) != 0, status&StatusStillRunning != 0
}

// OffCPU reports whether an overrun record's status marks a sample taken
// off the CPU.
func OffCPU(status uint32) bool { return status&StatusOffCPU != 0 }
