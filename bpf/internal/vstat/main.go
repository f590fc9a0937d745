// Command vstat loads spanwatch's BPF objects and prints each program's
// verifier statistics (a development aid).
package main

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/cilium/ebpf"

	"github.com/spanwatch/spanwatch/bpf"
)

func main() {
	if err := bpf.CheckArch(); err != nil {
		fmt.Println(err)
		os.Exit(1)
	}
	for _, load := range []struct {
		name string
		f    func() (*ebpf.CollectionSpec, error)
	}{{"spanwatch", bpf.LoadSpanwatch}, {"usdt", bpf.LoadUsdt}, {"coretest", bpf.LoadCoretest}, {"sourcetest", bpf.LoadSourcetest}} {
		spec, err := load.f()
		if err != nil {
			fmt.Println(err)
			os.Exit(1)
		}
		for name, p := range spec.Programs {
			if len(os.Args) > 1 && !strings.Contains(name, os.Args[1]) {
				continue
			}
			if name == "fentry_perf_tp_event" {
				continue
			}
			cs := spec.Copy()
			for n := range cs.Programs {
				if n != name {
					delete(cs.Programs, n)
				}
			}
			_ = p
			start := time.Now()
			c, err := ebpf.NewCollectionWithOptions(cs, ebpf.CollectionOptions{Programs: ebpf.ProgramOptions{LogLevel: ebpf.LogLevelStats}})
			d := time.Since(start)
			if err != nil {
				var verr *ebpf.VerifierError
				if os.Getenv("FULL") != "" && errors.As(err, &verr) {
					for _, l := range verr.Log[max(0, len(verr.Log)-12):] {
						fmt.Println(l)
					}
				}
				msg := err.Error()
				if i := strings.LastIndex(msg, "processed"); i >= 0 && os.Getenv("FULL") == "" {
					msg = msg[i:]
				}
				fmt.Printf("%s/%s: %v FAIL %s\n", load.name, name, d, msg)
				continue
			}
			log := c.Programs[name].VerifierLog
			if i := strings.Index(log, "processed"); i >= 0 {
				log = log[i:]
			}
			fmt.Printf("%s/%s: %v %s\n", load.name, name, d, strings.TrimSpace(log))
			c.Close()
		}
	}
}
