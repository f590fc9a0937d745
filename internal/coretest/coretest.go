//go:build linux

// Package coretest drives spanwatch's aggregation core without a probe:
// bpf/coretest.bpf.c, loaded beside a collector with its maps, aggregates
// entries written to its input map through BPF_PROG_TEST_RUN (raw
// tracepoint programs, 5.10+). Tests and benchmarks use it to check the
// core against Go and to fill the maps quickly; nothing in the agent does.
package coretest

import (
	"encoding/binary"
	"errors"
	"fmt"
	"time"

	"github.com/cilium/ebpf"

	"github.com/spanwatch/spanwatch/bpf"
	"github.com/spanwatch/spanwatch/snapshot"
)

// A Core is the test object loaded beside a collector.
type Core struct {
	objs   bpf.CoretestObjects
	compat bool
}

// compatRun is how many values a run of the compat object does
// (CORETEST_COMPAT_RUN): the methods split their work in such runs.
const compatRun = int(bpf.CoretestCoretestSizesCORETEST_COMPAT_RUN)

// Load loads the test object with the core's maps (collector.Maps()): the
// compat one (bpf/gen_compat.go) beside a collector whose core is the
// compat one (collector.Collector.Kernel().Core).
func Load(maps map[string]*ebpf.Map, compat bool) (*Core, error) {
	if err := bpf.CheckArch(); err != nil {
		return nil, err
	}
	load := bpf.LoadCoretest
	if compat {
		load = bpf.LoadCoretestCompat
	}
	spec, err := load()
	if err != nil {
		return nil, err
	}
	repl, err := bpf.ShareCore(spec, maps)
	if err != nil {
		return nil, err
	}
	c := &Core{compat: compat}
	if err := spec.LoadAndAssign(&c.objs, &ebpf.CollectionOptions{MapReplacements: repl}); err != nil {
		var verr *ebpf.VerifierError
		if errors.As(err, &verr) {
			return nil, fmt.Errorf("load coretest: %+v", verr)
		}
		return nil, fmt.Errorf("load coretest: %w", err)
	}
	return c, nil
}

// Close releases the test object.
func (c *Core) Close() error { return c.objs.Close() }

// Entry is one value for the core: a span's duration or a metric value.
type Entry struct {
	Name     string
	Cgroup   uint64
	Value    uint64
	Labels   [3]uint64
	Labelset uint16
	Metric   bool
	Error    bool
}

// Batch is the most entries one Put holds (CORETEST_BATCH).
const Batch = int(bpf.CoretestCoretestSizesCORETEST_BATCH)

// hotVals is the most values Hot cycles through (CORETEST_HOT_VALS).
const hotVals = int(bpf.CoretestCoretestSizesCORETEST_HOT_VALS)

// Put writes entries at input index first.. (at most Batch); a name is
// copied raw into the 128-byte field (a longer one fills it, as a payload
// would).
func (c *Core) Put(first int, es []Entry) error {
	keys := make([]uint32, len(es))
	vals := make([]bpf.CoretestCoretestIn, len(es))
	for i, e := range es {
		keys[i] = uint32(first + i)
		v := &vals[i]
		for j := 0; j < len(e.Name) && j < len(v.Name); j++ {
			v.Name[j] = int8(e.Name[j])
		}
		v.CgroupId, v.Value, v.Labels, v.Labelset = e.Cgroup, e.Value, e.Labels, e.Labelset
		if e.Metric {
			v.Kind = uint8(bpf.SpanwatchSeriesKindSERIES_METRIC)
		}
		if e.Error {
			v.Error = 1
		}
	}
	if _, err := c.objs.CoretestInput.BatchUpdate(keys, vals, nil); err != nil {
		return fmt.Errorf("write coretest input: %w", err)
	}
	return nil
}

// Run aggregates entries [first, first+n), repeat times over.
func (c *Core) Run(first, n, repeat int) error {
	if c.compat && n*repeat > compatRun {
		for r := 0; r < repeat; r++ {
			for off := 0; off < n; off += compatRun {
				if err := c.run(first+off, min(compatRun, n-off), 1); err != nil {
					return err
				}
			}
		}
		return nil
	}
	return c.run(first, n, repeat)
}

func (c *Core) run(first, n, repeat int) error {
	ctx := make([]byte, 3*8)
	binary.LittleEndian.PutUint64(ctx[0:], uint64(first))
	binary.LittleEndian.PutUint64(ctx[8:], uint64(n))
	binary.LittleEndian.PutUint64(ctx[16:], uint64(repeat))
	if _, err := c.objs.CoretestRun.Run(&ebpf.RunOptions{Context: ctx}); err != nil {
		return fmt.Errorf("run coretest: %w", err)
	}
	return nil
}

// RunTime is the kernel's BPF statistics of Run's program: its run time
// and runs so far (the caller enables the statistics, ebpf.EnableStats).
func (c *Core) RunTime() (time.Duration, uint64, error) {
	st, err := c.objs.CoretestRun.Stats()
	if err != nil {
		return 0, 0, err
	}
	return st.Runtime, st.RunCount, nil
}

// Aggregate writes and aggregates entries once each.
func (c *Core) Aggregate(es []Entry) error {
	for off := 0; off < len(es); off += Batch {
		end := min(off+Batch, len(es))
		if err := c.Put(0, es[off:end]); err != nil {
			return err
		}
		if err := c.Run(0, end-off, 1); err != nil {
			return err
		}
	}
	return nil
}

// Indexes returns the kernel's bucket index of each value (at most Batch):
// hist_value_index for metric values, else hist_duration_index.
func (c *Core) Indexes(vals []uint64, metric bool) ([]int32, error) {
	keys := make([]uint32, len(vals))
	for i := range keys {
		keys[i] = uint32(i)
	}
	if _, err := c.objs.CoretestVals.BatchUpdate(keys, vals, nil); err != nil {
		return nil, err
	}
	// The compat object does compatRun values a run, from args[2].
	step := len(vals)
	if c.compat {
		step = compatRun
	}
	for first := 0; first < len(vals); first += step {
		ctx := make([]byte, 24)
		binary.LittleEndian.PutUint64(ctx[0:], uint64(min(step, len(vals)-first)))
		if metric {
			binary.LittleEndian.PutUint64(ctx[8:], 1)
		}
		binary.LittleEndian.PutUint64(ctx[16:], uint64(first))
		if _, err := c.objs.CoretestIndex.Run(&ebpf.RunOptions{Context: ctx}); err != nil {
			return nil, err
		}
	}
	out := make([]int64, len(vals))
	okeys := make([]uint32, len(vals))
	var cursor ebpf.MapBatchCursor
	n, err := c.objs.CoretestIdx.BatchLookup(&cursor, okeys, out, nil)
	if err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
		return nil, err
	}
	got := make([]int32, 0, n)
	for i := 0; i < n && i < len(vals); i++ {
		got = append(got, int32(out[i]))
	}
	return got, nil
}

// Hot aggregates n values into one span series, the name hashed once, as a
// USDT fast path hands them to the core: the values cycle through vals (at
// most hotVals, 1024); with hint, the core keeps the series' slot in a hint as the
// USDT fast path does (agg_in.hint). It returns the program's own run time per value, from the
// kernel's BPF statistics (which the caller enables, ebpf.EnableStats).
func (c *Core) Hot(name string, cgroup uint64, vals []uint64, n int, hint bool) (time.Duration, error) {
	if len(vals) == 0 || len(vals) > hotVals {
		return 0, fmt.Errorf("hot: %d values, want 1 to %d", len(vals), hotVals)
	}
	e := Entry{Name: name, Cgroup: cgroup, Value: snapshot.NameID(name)}
	if err := c.Put(0, []Entry{e}); err != nil {
		return 0, err
	}
	keys := make([]uint32, len(vals))
	for i := range keys {
		keys[i] = uint32(i)
	}
	if _, err := c.objs.CoretestVals.BatchUpdate(keys, vals, nil); err != nil {
		return 0, err
	}
	before, err := c.objs.CoretestHot.Stats()
	if err != nil {
		return 0, err
	}
	// The compat object does compatRun values a run, each run from the
	// first value of vals again.
	step := n
	if c.compat {
		step = compatRun
	}
	for done := 0; done < n; done += step {
		ctx := make([]byte, 24)
		binary.LittleEndian.PutUint64(ctx[0:], uint64(min(step, n-done)))
		binary.LittleEndian.PutUint64(ctx[8:], uint64(len(vals)))
		if hint {
			binary.LittleEndian.PutUint64(ctx[16:], 1)
		}
		if _, err := c.objs.CoretestHot.Run(&ebpf.RunOptions{Context: ctx}); err != nil {
			return 0, fmt.Errorf("run coretest_hot: %w", err)
		}
	}
	after, err := c.objs.CoretestHot.Stats()
	if err != nil {
		return 0, err
	}
	return (after.Runtime - before.Runtime) / time.Duration(n), nil
}
