//go:build linux

package config

import (
	"context"
	"errors"
	"fmt"
	"math/rand"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/spanwatch/spanwatch/source/tracepoint"

	"github.com/spanwatch/spanwatch/collector"
	"github.com/spanwatch/spanwatch/internal/memory"
	"github.com/spanwatch/spanwatch/internal/tpsource"
	"github.com/spanwatch/spanwatch/policy"
)

// limitFile is a configuration file near or past each limit the kernel and
// the collector set, described by its values: the test renders it as YAML
// for check, and hands the same values to the parts run starts.
type limitFile struct {
	exact, globs, globLen int           // budgets: exact names, globs, and one glob of globLen bytes (0: none)
	budget                time.Duration // the first exact budget's
	maxSeries, cells      int64         // collector: (0: left out)
	quota, ringbuf, queue int64
	ueSources, ehSources  int // tracepoint sources
}

func (f limitFile) yaml() string {
	var b strings.Builder
	b.WriteString("rules:\n  - {name: R, span: x, when: count > 0}\nbudgets:\n")
	for i := 0; i < f.exact; i++ {
		d := time.Second
		if i == 0 {
			d = f.budget
		}
		fmt.Fprintf(&b, "  - {span: e%d, budget: %dns}\n", i, d.Nanoseconds())
	}
	for i := 0; i < f.globs; i++ {
		fmt.Fprintf(&b, "  - {span: \"g%d.*\", budget: 1s}\n", i)
	}
	if f.globLen > 0 {
		fmt.Fprintf(&b, "  - {span: \"%s*\", budget: 1s}\n", strings.Repeat("l", f.globLen-1))
	}
	b.WriteString("collector:\n  interval: 1s\n")
	for _, kv := range []struct {
		k string
		v int64
	}{{"max_series", f.maxSeries}, {"histogram_cells", f.cells}, {"series_quota", f.quota}, {"ringbuf_bytes", f.ringbuf}, {"overrun_queue", f.queue}} {
		if kv.v != 0 {
			fmt.Fprintf(&b, "  %s: %d\n", kv.k, kv.v)
		}
	}
	if f.ueSources+f.ehSources > 0 {
		b.WriteString("sources:\n")
		if f.ueSources > 0 {
			b.WriteString("  user_events:\n")
			for i := 0; i < f.ueSources; i++ {
				fmt.Fprintf(&b, "    - {event: ev%d, span: s%d, duration_field: d}\n", i, i)
			}
		}
		if f.ehSources > 0 {
			b.WriteString("  eventheader:\n")
			for i := 0; i < f.ehSources; i++ {
				fmt.Fprintf(&b, "    - {provider: p%d}\n", i)
			}
		}
	}
	return b.String()
}

func (f limitFile) budgets() []collector.BudgetRule {
	var out []collector.BudgetRule
	for i := 0; i < f.exact; i++ {
		d := time.Second
		if i == 0 {
			d = f.budget
		}
		out = append(out, collector.BudgetRule{Span: fmt.Sprintf("e%d", i), Budget: d})
	}
	for i := 0; i < f.globs; i++ {
		out = append(out, collector.BudgetRule{Span: fmt.Sprintf("g%d.*", i), Budget: time.Second})
	}
	if f.globLen > 0 {
		out = append(out, collector.BudgetRule{Span: strings.Repeat("l", f.globLen-1) + "*", Budget: time.Second})
	}
	return out
}

func (f limitFile) tracepoints() []tpsource.Source {
	var out []tpsource.Source
	for i := 0; i < f.ueSources; i++ {
		out = append(out, tpsource.Source{Kind: tpsource.UserEvents, Event: fmt.Sprintf("ev%d", i), Span: fmt.Sprintf("s%d", i), DurationField: tpsource.Field{"d"}})
	}
	for i := 0; i < f.ehSources; i++ {
		out = append(out, tpsource.Source{Kind: tpsource.EventHeader, Provider: fmt.Sprintf("p%d", i)})
	}
	return out
}

// genLimitFile picks each value near its limit: mostly at or just inside
// it, sometimes just past it.
func genLimitFile(rng *rand.Rand) limitFile {
	pick := func(ok []int64, bad []int64) int64 {
		if rng.Intn(12) == 0 {
			return bad[rng.Intn(len(bad))]
		}
		return ok[rng.Intn(len(ok))]
	}
	page := int64(os.Getpagesize())
	maxNs := int64(collector.MaxBudget)
	f := limitFile{
		exact:     int(pick([]int64{1, int64(collector.MaxExactBudgets) - 1, int64(collector.MaxExactBudgets)}, []int64{int64(collector.MaxExactBudgets) + 1})),
		globs:     int(pick([]int64{0, int64(collector.MaxGlobBudgets) - 2, int64(collector.MaxGlobBudgets) - 1}, []int64{int64(collector.MaxGlobBudgets)})),
		globLen:   int(pick([]int64{0, int64(collector.MaxGlobLen) - 1, int64(collector.MaxGlobLen)}, []int64{int64(collector.MaxGlobLen) + 1, int64(collector.MaxGlobLen) + 20})),
		budget:    time.Duration(pick([]int64{1, maxNs - 1, maxNs}, []int64{maxNs + 1, int64(9000 * time.Hour)})),
		maxSeries: pick([]int64{0, collector.MinMaxSeries, int64(collector.MaxSeriesLimit)}, []int64{collector.MinMaxSeries - 1, int64(collector.MaxSeriesLimit) + 1}),
		cells:     pick([]int64{0, collector.MinHistogramCells, collector.MaxHistogramCells}, []int64{collector.MinHistogramCells - 1, collector.MaxHistogramCells + 1}),
		quota:     pick([]int64{0, 1, int64(collector.MaxSeriesLimit)}, []int64{int64(collector.MaxSeriesLimit) + 1}),
		ringbuf:   pick([]int64{0, page, collector.MaxRingbufBytes}, []int64{page - 1, 3 * page, 2 * collector.MaxRingbufBytes}),
		queue:     pick([]int64{0, 1, collector.MaxOverrunQueue}, []int64{collector.MaxOverrunQueue + 1}),
	}
	switch rng.Intn(4) {
	case 1:
		f.ueSources = int(pick([]int64{1, 255, 256}, []int64{257}))
	case 2:
		f.ehSources = int(pick([]int64{1, 255, 256}, []int64{257}))
	}
	return f
}

// TestCheckEqualsRunLimits generates configuration files near and past
// every limit check and run share (the budgets: their range, how many
// exact names and globs, a glob's length; the collector: sizes: series,
// histogram cells, series quota, ring buffer, overrun queue; the number of
// tracepoint sources the kernel's maps hold) and compares check's verdict
// (Load) with run's, taken from the parts run starts, given the same
// values: the budgets written into a real collector's kernel maps
// (PrepareBudgets, then Abort), the collector's sizes checked as New
// checks them (and a real New for the small ones), the tracepoint sources
// as tracepoint.Attach checks them, the sizes against the memory budget
// as the agent's plan holds them. The verdicts must be equal for every
// file.
func TestCheckEqualsRunLimits(t *testing.T) {
	requireRoot(t)
	col, err := collector.New(context.Background(), collector.Config{Sources: collector.Sources{Marker: true}, ScanInterval: -1, MaxSeries: 1024, HistogramCells: 1 << 12})
	if err != nil {
		t.Fatal(err)
	}
	defer col.Close()
	seed := time.Now().UnixNano()
	rng := rand.New(rand.NewSource(seed))
	n := 300
	if testing.Short() {
		n = 60
	}
	dir := t.TempDir()
	accepted, realNew := 0, 0
	for i := 0; i < n; i++ {
		f := genLimitFile(rng)
		path := filepath.Join(dir, fmt.Sprintf("limits%d.yaml", i))
		if err := os.WriteFile(path, []byte(f.yaml()), 0o644); err != nil {
			t.Fatal(err)
		}
		_, checkErr := Load(path, LoadOptions{Collector: CollectorSettings{Interval: DefaultInterval}})

		// run's verdict, part by part, from the values themselves.
		var runErrs []error
		if ch, err := col.PrepareBudgets(f.budgets()); err != nil {
			runErrs = append(runErrs, err)
		} else {
			ch.Abort()
		}
		ccfg := collector.Config{MaxSeries: uint32(f.maxSeries), HistogramCells: uint32(f.cells), SeriesQuota: uint32(f.quota),
			RingbufBytes: uint32(f.ringbuf), OverrunQueue: int(f.queue)}
		sizesErr := collector.CheckConfig(ccfg)
		if sizesErr != nil {
			runErrs = append(runErrs, sizesErr)
		}
		// A real collector where it is cheap: small maps, or sizes New
		// refuses before it loads anything.
		if (f.maxSeries > 0 && f.maxSeries <= collector.MinMaxSeries) && (f.cells > 0 && f.cells <= collector.MinHistogramCells) || sizesErr != nil {
			ccfg.Sources, ccfg.ScanInterval = collector.Sources{Marker: true}, -1
			c, err := collector.New(context.Background(), ccfg)
			if err == nil {
				c.Close()
			}
			if (err == nil) != (sizesErr == nil) {
				t.Errorf("file %d: collector.New says %v, its own check %v", i, err, sizesErr)
			}
			realNew++
		}
		runErrs = append(runErrs, tracepoint.CheckTracepointSources(f.tracepoints())...)
		// The memory plan run applies before it loads anything: the
		// sizes against the budget (this machine's), with the maps the
		// collector would make.
		if sizesErr == nil {
			b, err := memory.Detect(memory.Env{}, 0)
			if err == nil {
				_, err = memory.NewPlan(b, memory.Inputs{MaxSeries: uint32(f.maxSeries), HistogramCells: uint32(f.cells), OverrunQueue: int(f.queue),
					Interval: time.Second, LongestRange: policy.DefaultOver, Binary: BinaryBytes,
					KernelBytes: mapEstimate(CollectorSettings{RingbufBytes: uint32(f.ringbuf)})})
			}
			if err != nil {
				runErrs = append(runErrs, err)
			}
		}
		runErr := errors.Join(runErrs...)

		if (checkErr == nil) != (runErr == nil) {
			t.Errorf("file %d (seed %d): check and run disagree\n  values: %+v\n  check: %v\n  run:   %v", i, seed, f, firstLine(checkErr), firstLine(runErr))
		}
		if checkErr == nil {
			accepted++
		}
		if keep := os.Getenv("SPANWATCH_LIMITS_KEEP"); keep != "" {
			// The files and run's verdicts, to try another spanwatch's
			// check on them (how the before/after figures were taken).
			os.WriteFile(filepath.Join(keep, filepath.Base(path)), []byte(f.yaml()), 0o644)
			os.WriteFile(filepath.Join(keep, filepath.Base(path)+".run"), []byte(firstLine(runErr)+"\n"), 0o644)
		}
	}
	t.Logf("%d files generated near and past every limit (seed %d): %d accepted by both, %d refused by both; %d checked against a real collector.New too", n, seed, accepted, n-accepted, realNew)
	if accepted == 0 || accepted == n {
		t.Errorf("the generator made only one kind of file")
	}
}

func firstLine(err error) string {
	if err == nil {
		return "ok"
	}
	s, _, _ := strings.Cut(err.Error(), "\n")
	return s
}
