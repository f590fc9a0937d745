//go:build linux

// Command fill keeps a running spanwatch agent at a given number of
// series, fast: it opens the agent's aggregation maps by id (from
// /proc/PID/fdinfo), loads the core's test object beside them
// (internal/coretest) and, every interval, aggregates a few values into
// each series through BPF_PROG_TEST_RUN, as if that many spans had ended.
// bench/memory/run.sh uses it to hold an agent at full series capacity
// while a real Prometheus scrapes it. Needs root (or CAP_BPF and
// CAP_PERFMON, and ptrace access to the agent).
//
//	fill --pid $(pidof spanwatch) --series 131072 --every 5s
package main

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/cilium/ebpf"

	"github.com/spanwatch/spanwatch/bpf"
	"github.com/spanwatch/spanwatch/internal/coretest"
	"github.com/spanwatch/spanwatch/internal/kernel"
)

func main() {
	pid := flag.Int("pid", 0, "the agent's `PID`")
	series := flag.Int("series", 131072, "how many series to keep live")
	values := flag.Int("values", 8, "values per series per round, each in a bucket of its own")
	cgroups := flag.Int("cgroups", 32, "cgroup ids to spread the series over (the default series quota is 8192 per cgroup)")
	every := flag.Duration("every", 5*time.Second, "how often each series gets its values")
	duration := flag.Duration("duration", 0, "stop after this long (0: until SIGTERM or SIGINT)")
	flag.Parse()
	if *pid <= 0 {
		fmt.Fprintln(os.Stderr, "fill: --pid is required")
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	if *duration > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, *duration)
		defer cancel()
	}
	if err := run(ctx, *pid, *series, *values, *cgroups, *every); err != nil {
		fmt.Fprintln(os.Stderr, "fill:", err)
		os.Exit(1)
	}
}

// agentMaps opens the core maps the agent with this pid holds, by the ids
// its file descriptors name.
func agentMaps(pid int) (map[string]*ebpf.Map, error) {
	dir := fmt.Sprintf("/proc/%d/fdinfo", pid)
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	want := map[string]bool{}
	for _, n := range bpf.CoreMaps {
		want[n] = true
	}
	out := map[string]*ebpf.Map{}
	for _, e := range ents {
		id, ok := mapID(filepath.Join(dir, e.Name()))
		if !ok {
			continue
		}
		m, err := ebpf.NewMapFromID(ebpf.MapID(id))
		if err != nil {
			continue
		}
		info, err := m.Info()
		if err != nil || !want[info.Name] || out[info.Name] != nil {
			m.Close()
			continue
		}
		out[info.Name] = m
	}
	for n := range want {
		if out[n] == nil {
			return nil, fmt.Errorf("pid %d holds no map %q: is it a spanwatch agent?", pid, n)
		}
	}
	return out, nil
}

func mapID(path string) (uint32, bool) {
	f, err := os.Open(path)
	if err != nil {
		return 0, false
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "map_id:"); ok {
			id, err := strconv.ParseUint(strings.TrimSpace(v), 10, 32)
			return uint32(id), err == nil
		}
	}
	return 0, false
}

func run(ctx context.Context, pid, series, values, cgroups int, every time.Duration) error {
	maps, err := agentMaps(pid)
	if err != nil {
		return err
	}
	// The agent loaded the objects the probes choose on this kernel
	// (kernel.Probe runs the same probes here).
	variant, err := kernel.Probe().ChooseCore()
	if err != nil {
		return err
	}
	core, err := coretest.Load(maps, variant == kernel.CoreCompat)
	if err != nil {
		return err
	}
	defer core.Close()
	// Names of a realistic length: HTTP routes of many services.
	names := make([]string, series)
	for i := range names {
		names[i] = fmt.Sprintf("GET /api/v1/service-%03d/resource-%05d/{id}", i%977, i)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	batch := make([]coretest.Entry, 0, coretest.Batch)
	flush := func() error {
		if len(batch) == 0 {
			return nil
		}
		if err := core.Put(0, batch); err != nil {
			return err
		}
		if err := core.Run(0, len(batch), 1); err != nil {
			return err
		}
		batch = batch[:0]
		return nil
	}
	tick := time.NewTicker(every)
	defer tick.Stop()
	for round := 0; ; round++ {
		start := time.Now()
		for i, name := range names {
			// A series' values sit around its own base latency, 2%
			// apart (a bucket is 1.09% wide), with one value spread
			// wider each round so cumulative histograms keep growing a
			// little, as real ones do.
			base := 200e3 + float64(i%4096)*1e3
			for j := 0; j < values; j++ {
				v := base * (1 + 0.02*float64(j))
				if j == values-1 {
					v = base * (1 + rng.Float64()*3)
				}
				batch = append(batch, coretest.Entry{Name: name, Cgroup: uint64(1000 + i%cgroups), Value: uint64(v), Error: j == 0 && i%10 == 0})
				if len(batch) == cap(batch) {
					if err := flush(); err != nil {
						return err
					}
				}
			}
		}
		if err := flush(); err != nil {
			return err
		}
		if round == 0 {
			fmt.Printf("fill: %d series x %d values in %s\n", series, values, time.Since(start).Round(time.Millisecond))
		}
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
	}
}
