//go:build unix

package policy

import (
	"syscall"
	"time"
)

// cpuTime is the process's CPU time so far (user and system, every
// thread). On a machine whose cores other work shares, CPU time per
// operation is steadier than wall time.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
