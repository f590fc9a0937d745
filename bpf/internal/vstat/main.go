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
	"sort"
	"strings"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/features"
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
		{"compat/spanwatch", bpf.LoadSpanwatchCompat}, {"compat/usdt", bpf.LoadUsdtCompat},
		{"compat/coretest", bpf.LoadCoretestCompat},
	} {
		spec, err := load.f()
		if err != nil {
			fmt.Println(err)
			os.Exit(1)
		}
		// As the tracer does on kernels without BPF cookies (5.15+).
		if v := spec.Variables["usdt_have_cookie"]; v != nil && features.HaveProgramHelper(ebpf.Kprobe, asm.FnGetAttachCookie) != nil {
			if err := v.Set(uint32(0)); err != nil {
				fmt.Println(err)
				os.Exit(1)
			}
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
			c, err := ebpf.NewCollectionWithOptions(cs, ebpf.CollectionOptions{Programs: ebpf.ProgramOptions{LogLevel: level, LogSizeStart: 64 << 20}})
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
			if os.Getenv("FULL") != "" {
				hot(log)
			}
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

// hot prints where the verifier resumed most often ("from X to Y"): the
// branches whose paths it walks again and again.
func hot(log string) {
	lines := strings.Split(log, "\n")
	fmt.Printf("    log: %d bytes, %d lines\n", len(log), len(lines))
	for i := 0; i < len(lines) && i < 5; i++ {
		fmt.Println("    | " + lines[i])
	}
	n := map[string]int{}
	for _, l := range strings.Split(log, "\n") {
		if l = strings.TrimSpace(l); strings.HasPrefix(l, "from ") {
			f := strings.Fields(l)
			if len(f) >= 4 {
				n[f[1]+" -> "+strings.TrimSuffix(f[3], ":")]++
			}
		}
	}
	type kv struct {
		k string
		v int
	}
	var all []kv
	for k, v := range n {
		all = append(all, kv{k, v})
	}
	sort.Slice(all, func(i, j int) bool { return all[i].v > all[j].v })
	for i := 0; i < len(all) && i < 15; i++ {
		fmt.Printf("    %6d  from %s\n", all[i].v, all[i].k)
	}
}
