// Command vstat loads spanwatch's BPF objects and prints each program's
// verifier statistics (a development aid): one line per program, with
// the verifier's last lines when it refuses one (all of them with FULL=1).
//
//	go run ./bpf/internal/vstat [PROGRAM-SUBSTRING]
package main

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/rlimit"

	"github.com/spanwatch/spanwatch/bpf"
)

func main() {
	if err := bpf.CheckArch(); err != nil {
		fmt.Println(err)
		os.Exit(1)
	}
	if err := rlimit.RemoveMemlock(); err != nil {
		fmt.Println(err)
	}
	failed := 0
	for _, load := range []struct {
		name string
		f    func() (*ebpf.CollectionSpec, error)
	}{
		{"spanwatch", bpf.LoadSpanwatch}, {"usdt", bpf.LoadUsdt}, {"inflight", bpf.LoadInflight},
		{"eventheader", bpf.LoadEventheader}, {"userevents", bpf.LoadUserevents},
		{"coretest", bpf.LoadCoretest}, {"sourcetest", bpf.LoadSourcetest},
	} {
		spec, err := load.f()
		if err != nil {
			fmt.Println(err)
			os.Exit(1)
		}
		for name := range spec.Programs {
			if len(os.Args) > 1 && !strings.Contains(load.name+"/"+name, os.Args[1]) {
				continue
			}
			cs := spec.Copy()
			for n := range cs.Programs {
				if n != name {
					delete(cs.Programs, n)
				}
			}
			// Small maps: the point is the verifier, not memory.
			for _, m := range cs.Maps {
				if m.MaxEntries > 65536 && m.Type != ebpf.RingBuf {
					m.MaxEntries = 65536
				}
			}
			start := time.Now()
			level := ebpf.LogLevelStats
			if os.Getenv("FULL") != "" {
				level |= ebpf.LogLevelBranch
			}
			c, err := ebpf.NewCollectionWithOptions(cs, ebpf.CollectionOptions{Programs: ebpf.ProgramOptions{LogLevel: level, LogSizeStart: 1 << 20}})
			d := time.Since(start).Round(time.Millisecond)
			if err != nil {
				failed++
				var verr *ebpf.VerifierError
				if errors.As(err, &verr) {
					n := 12
					if os.Getenv("FULL") != "" {
						n = len(verr.Log)
					}
					for _, l := range verr.Log[max(0, len(verr.Log)-n):] {
						fmt.Println("    " + l)
					}
				}
				msg := err.Error()
				if i := strings.LastIndex(msg, "processed"); i >= 0 {
					msg = msg[i:]
				}
				fmt.Printf("%s/%s: %v FAIL %s\n", load.name, name, d, msg)
				continue
			}
			log := c.Programs[name].VerifierLog
			if i := strings.Index(log, "stack depth"); i >= 0 {
				log = log[i:]
			} else if i := strings.Index(log, "processed"); i >= 0 {
				log = log[i:]
			}
			fmt.Printf("%s/%s: %v ok %s\n", load.name, name, d, strings.Join(strings.Fields(log), " "))
			c.Close()
		}
	}
	fmt.Printf("%d failed\n", failed)
}
