//go:build linux

package perftp

import (
	"fmt"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
)

// CheckInterval is how often the online CPUs are checked against the
// perf events of a Set (Set.Check, Watch): spans written on a CPU that
// comes online are lost for at most this long.
var CheckInterval = time.Second

// AttachProgram attaches a program on perf_tp_event by method: "fentry"
// (a tracing link: BTF and trampolines) or "kprobe".
func AttachProgram(method string, prog *ebpf.Program) (link.Link, error) {
	var l link.Link
	var err error
	if method == "fentry" {
		l, err = link.AttachTracing(link.TracingOptions{Program: prog})
	} else {
		l, err = link.Kprobe("perf_tp_event", prog, nil)
	}
	if err != nil {
		return nil, fmt.Errorf("attach %s to perf_tp_event: %w", method, err)
	}
	return l, nil
}

// Watch checks p against the online CPUs every CheckInterval until stop
// is closed.
func Watch(p *Set, stop <-chan struct{}) {
	t := time.NewTicker(CheckInterval)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
			p.Check()
		}
	}
}
