//go:build linux

package collector

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	usdtsource "github.com/spanwatch/spanwatch/source/usdt"

	"gopkg.in/yaml.v3"

	"github.com/spanwatch/spanwatch/config/section"
	"github.com/spanwatch/spanwatch/internal/bpftest"
	"github.com/spanwatch/spanwatch/internal/kernel"
	"github.com/spanwatch/spanwatch/internal/usdt"
	"github.com/spanwatch/spanwatch/snapshot"
)

// service is internal/usdt/testdata/service.c, built as its authors would
// (plain gcc -O2 -g -fno-omit-frame-pointer) and running.
type service struct {
	t     *testing.T
	path  string
	cmd   *exec.Cmd
	stdin io.WriteCloser
	out   *bufio.Scanner
}

func buildService(t *testing.T) string {
	t.Helper()
	return bpftest.CProgram(t, "service")
}

func startService(t *testing.T, path string) *service {
	t.Helper()
	s := &service{t: t, path: path, cmd: exec.Command(path)}
	s.stdin, _ = s.cmd.StdinPipe()
	stdout, _ := s.cmd.StdoutPipe()
	if err := s.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.stdin.Close(); s.cmd.Process.Kill(); s.cmd.Wait() })
	s.out = bufio.NewScanner(stdout)
	if !s.out.Scan() || s.out.Text() != "ready" {
		t.Fatalf("service said %q, want ready", s.out.Text())
	}
	return s
}

// do sends a command and returns the lines it printed before "ok".
func (s *service) do(cmd string) [][]string {
	s.t.Helper()
	io.WriteString(s.stdin, cmd+"\n")
	var lines [][]string
	for s.out.Scan() {
		if s.out.Text() == "ok" {
			return lines
		}
		lines = append(lines, strings.Fields(s.out.Text()))
	}
	s.t.Fatalf("service ended during %q", cmd)
	return nil
}

func atoi(s string) int64 {
	v, _ := strconv.ParseInt(s, 10, 64)
	return v
}

// parseUSDTSources decodes a sources: section as the agent does.
func parseUSDTSources(t *testing.T, doc string) []usdt.SpanSource {
	t.Helper()
	var n yaml.Node
	if err := yaml.Unmarshal([]byte(doc), &n); err != nil {
		t.Fatal(err)
	}
	// The usdt: list of the sources: section, as package config hands it
	// to internal/usdt.
	d := section.NewDecoder("test.yaml", nil)
	srcs := usdt.DecodeSources(d, n.Content[0].Content[1].Content[1])
	if err := d.Err(); err != nil {
		t.Fatal(err)
	}
	return srcs
}

var routeNames = []string{"GET /api/orders", "POST /api/orders/{id}/pay", "GET /api/health", "GET /slow"}

// TestUSDTService runs a service built the way its authors build it and
// expects what a user would: every request counted under its route name
// (string literals on pages the process never touched), errors exactly the
// requests with a status of 500 or more, counts per status label, a budget
// on one route catching exactly that route's slow requests with stacks
// reaching main, and a bad name pointer counted under a visible name. It
// runs for each way the kernel can read the names.
func TestUSDTService(t *testing.T) {
	bin := buildService(t)
	requireBPF(t)
	for _, tc := range []struct {
		name string
		cfg  usdt.TracerConfig
		// method is the tracer's NameMethod; fallback says the names
		// must (at least once) have come through the tracer.
		method   string
		fallback bool
	}{
		{"copy_from_user_str", usdt.TracerConfig{}, "copy_from_user_str", false},
		{"copy_from_user", usdt.TracerConfig{NoStrKfunc: true}, "copy_from_user", false},
		{"probe_read", usdt.TracerConfig{NoSleepable: true}, "probe_read", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			switch tc.method {
			case "copy_from_user_str":
				bpftest.Require(t, kernel.SleepableUprobe, kernel.CopyFromUserStr)
			case "copy_from_user":
				bpftest.Require(t, kernel.SleepableUprobe)
			}
			testUSDTService(t, bin, tc.cfg, tc.method, tc.fallback)
		})
	}
}

// testUSDTService runs the service under two sources on the same probes,
// one judging errors, one labelling by status; without BPF cookies (before
// 5.15) a call site feeds one source, and one source does both.
func testUSDTService(t *testing.T, bin string, cfg usdt.TracerConfig, method string, fallback bool) {
	cookies := kernel.Probe().Has(kernel.AttachCookie)
	c, err := New(context.Background(), Config{Sources: Sources{Marker: true}, ScanInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	svc := startService(t, bin)
	yaml := `
sources:
  usdt:
    - binary: %[1]s
      name_arg: 0
      start: {provider: svc, probe: request__start}
      end: {provider: svc, probe: request__done}
      error: "arg0 >= 500"
    - binary: %[1]s
      name_arg: 0
      start: {provider: svc, probe: request__start}
      end: {provider: svc, probe: request__done}
      labels: {status: arg0}
      label_cap: 6
`
	nsrc := uint64(2)
	if !cookies {
		yaml, nsrc = `
sources:
  usdt:
    - binary: %[1]s
      name_arg: 0
      start: {provider: svc, probe: request__start}
      end: {provider: svc, probe: request__done}
      error: "arg0 >= 500"
      labels: {status: arg0}
      label_cap: 6
`, 1
	}
	srcs := parseUSDTSources(t, fmt.Sprintf(yaml, bin))
	tr, err := usdtsource.AttachWith(context.Background(), c.SourceCore(), cfg, srcs)
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	if got := tr.NameMethod(); got != method {
		t.Fatalf("names read with %s, want %s", got, method)
	}
	const baseUs = 2000
	budget := 15 * time.Millisecond
	if err := c.SetBudgets([]BudgetRule{{Span: "GET /api/orders", Budget: budget}}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Snapshot(); err != nil { // a fresh window
		t.Fatal(err)
	}

	const n = 48
	svc.do("z") // the route names' page absent, as never touched
	type want struct {
		count, errors uint64
		byStatus      map[string]uint64
		minOver       int
		maxOver       int
	}
	wants := map[string]*want{}
	statuses := map[string]bool{}
	for _, f := range svc.do(fmt.Sprintf("r %d %d", n, baseUs)) {
		route := routeNames[atoi(f[1])]
		w := wants[route]
		if w == nil {
			w = &want{byStatus: map[string]uint64{}}
			wants[route] = w
		}
		w.count++
		if atoi(f[2]) >= 500 {
			w.errors++
		}
		statuses[f[2]] = true
		w.byStatus[f[2]]++
		if route == "GET /api/orders" {
			if atoi(f[3]) > int64(budget) {
				w.minOver++
			}
			if atoi(f[4]) > int64(budget) {
				w.maxOver++
			}
		}
	}
	svc.do("b 5")
	if len(statuses) <= 6 {
		t.Fatalf("the service used %d statuses: the cap of 6 is not exercised", len(statuses))
	}

	var series []snapshot.Series
	var overruns []snapshot.Overrun
	// Overruns reach the snapshot once symbolized: seconds under -race on
	// a busy machine. The loop ends as soon as they are all in.
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		s, err := c.Snapshot()
		if err != nil {
			t.Fatal(err)
		}
		if series == nil {
			series = s.Series
		}
		overruns = append(overruns, s.Overruns...)
		// The unlabeled source's ended overruns: the labeled source
		// sends its own for the same spans.
		ended := 0
		for _, ov := range overruns {
			if !ov.StillRunning && (len(ov.SourceLabels) == 0 || nsrc == 1) {
				ended++
			}
		}
		if ended >= wants["GET /api/orders"].minOver {
			time.Sleep(200 * time.Millisecond)
			s, _ := c.Snapshot()
			overruns = append(overruns, s.Overruns...)
			break
		}
		time.Sleep(100 * time.Millisecond)
	}

	plain := map[string]snapshot.Series{}
	labeled := map[string]map[string]uint64{}
	for _, sr := range series {
		if sr.Count == 0 {
			continue
		}
		if strings.HasPrefix(sr.Span, "(name@") {
			t.Errorf("series %q: a placeholder left in the snapshot", sr.Span)
		}
		if sr.SourceLabels == nil {
			if _, dup := plain[sr.Span]; dup {
				t.Errorf("two series for %q", sr.Span)
			}
			plain[sr.Span] = sr
			continue
		}
		if labeled[sr.Span] == nil {
			labeled[sr.Span] = map[string]uint64{}
		}
		labeled[sr.Span][sr.SourceLabels["status"]] += sr.Count
		if nsrc == 1 {
			// One source: its series by status add up to the route's.
			p := plain[sr.Span]
			p.Span = sr.Span
			p.Count += sr.Count
			p.Errors += sr.Errors
			p.OverBudget += sr.OverBudget
			plain[sr.Span] = p
		}
	}
	for route, w := range wants {
		sr, ok := plain[route]
		if !ok {
			t.Errorf("no series %q (have %v)", route, keys(plain))
			continue
		}
		if sr.Count != w.count || sr.Errors != w.errors {
			t.Errorf("%s: count %d errors %d, want %d and %d", route, sr.Count, sr.Errors, w.count, w.errors)
		}
	}
	// The first 6 statuses seen keep their value; the others are "other".
	kept := map[string]bool{}
	for _, f := range []string{"200", "404", "500", "503", "201", "499"} { // request order
		kept[f] = true
	}
	for route, w := range wants {
		want := map[string]uint64{}
		for st, k := range w.byStatus {
			if kept[st] {
				want[st] += k
			} else {
				want["other"] += k
			}
		}
		if fmt.Sprint(labeled[route]) != fmt.Sprint(want) {
			t.Errorf("%s by status: %v, want %v", route, labeled[route], want)
		}
	}
	if sr := plain[usdt.UnreadableName]; sr.Count != 5 {
		t.Errorf("%q: %d spans, want the 5 with a bad name pointer", usdt.UnreadableName, sr.Count)
	}

	st, err := tr.Stats()
	if err != nil {
		t.Fatal(err)
	}
	// The budget: exactly the slow requests of its route. Through the
	// fallback, the spans counted under a placeholder before the tracer
	// read their name were judged against no budget (docs/sources.md).
	o := wants["GET /api/orders"]
	got := plain["GET /api/orders"].OverBudget
	lo := uint64(o.minOver)
	if fallback {
		lo -= min(lo, st.NameFallback+st.NameCached-5*nsrc)
	}
	if got < lo || got > uint64(o.maxOver) || got == 0 {
		t.Errorf("GET /api/orders over budget %d, want %d..%d", got, lo, o.maxOver)
	}
	for route, sr := range plain {
		if route != "GET /api/orders" && sr.OverBudget != 0 {
			t.Errorf("%s: %d over budget, but only GET /api/orders has a budget", route, sr.OverBudget)
		}
	}
	n2 := 0
	for _, ov := range overruns {
		if ov.Span != "GET /api/orders" {
			t.Errorf("overrun of %q", ov.Span)
			continue
		}
		if ov.StillRunning {
			continue // a sample of the span while it ran (the in-flight watcher)
		}
		if len(ov.SourceLabels) == 0 || nsrc == 1 {
			n2++ // the unlabeled source's; the labeled one sends its own
		}
		var fns []string
		for _, f := range ov.UserStack {
			fns = append(fns, f.Function)
		}
		if !containsAll(fns, "handle_request", "serve", "main") {
			t.Errorf("overrun stack %v: want handle_request, serve and main", fns)
		}
	}
	if uint64(n2) != got {
		t.Errorf("%d overrun records of the unlabeled source, want %d", n2, got)
	}

	// The 10 bad pointers (5 per source) go through the tracer, the
	// first ones as placeholders, later ones from its cache.
	unread := st.NameFallback + st.NameCached
	if fallback && unread <= 5*nsrc {
		t.Errorf("no name went through the tracer with %s: the test did not exercise the fallback (%+v)", method, st)
	}
	if !fallback && unread != 5*nsrc {
		t.Errorf("%d names went through the tracer with %s, want the %d bad pointers (%+v)", unread, method, 5*nsrc, st)
	}
	if st.Unpaired != 0 || st.NestOverflow != 0 {
		t.Errorf("unpaired %d, overflow %d; want none", st.Unpaired, st.NestOverflow)
	}
}

func containsAll(have []string, want ...string) bool {
	for _, w := range want {
		found := false
		for _, h := range have {
			if h == w {
				found = true
			}
		}
		if !found {
			return false
		}
	}
	return true
}

// TestUSDTMetricAndRecursion checks an argument metric over a signed
// argument (exact count, sum, min and max, negative values included) and a
// recursive function paired by thread (exact counts and durations per
// depth, labelled by an argument), then a recursion deeper than a
// thread's stack: the innermost spans still pair, the oldest give way,
// both counted.
func TestUSDTMetricAndRecursion(t *testing.T) {
	bin := buildService(t)
	requireBPF(t)
	c, err := New(context.Background(), Config{Sources: Sources{Marker: true}, ScanInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	svc := startService(t, bin)
	srcs := parseUSDTSources(t, fmt.Sprintf(`
sources:
  usdt:
    - binary: %[1]s
      metric: queue_delta
      probe: {provider: svc, probe: queue}
      value_arg: 0
      error: "arg0 < -2"
    - binary: %[1]s
      span: rec
      start: {provider: svc, probe: rec__enter}
      end: {provider: svc, probe: rec__exit}
      labels: {depth: arg0}
    - binary: %[1]s
      span: op
      start: {provider: svc, probe: op__start}
      end: {provider: svc, probe: op__done}
    - binary: %[1]s
      span: txn
      start: {provider: svc, probe: txn__start}
      end: {provider: svc, probe: txn__done}
`, bin))
	tr, err := usdtsource.Attach(context.Background(), c.SourceCore(), srcs)
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	if _, err := c.Snapshot(); err != nil {
		t.Fatal(err)
	}

	q := svc.do("q 1000")[0]
	const depth, rounds, baseUs = 6, 4, 1000
	inner, outer := map[string][]uint64{}, map[string][]uint64{}
	for _, f := range svc.do(fmt.Sprintf("d %d %d %d", depth, rounds, baseUs)) {
		inner[f[1]] = append(inner[f[1]], uint64(atoi(f[2])))
		outer[f[1]] = append(outer[f[1]], uint64(atoi(f[3])))
	}
	s, err := c.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	var metric *snapshot.Series
	recs := map[string]snapshot.Series{}
	for i := range s.Series {
		sr := &s.Series[i]
		switch {
		case sr.Span == "queue_delta":
			metric = sr
		case sr.Span == "rec" && sr.Count > 0:
			recs[sr.SourceLabels["depth"]] = *sr
		}
	}
	if metric == nil {
		t.Fatal("no queue_delta series")
	}
	// 1000 deltas (i % 7) - 3: 142 full cycles (sum 0) and 6 more.
	wantErrors := uint64(0)
	for i := 0; i < 1000; i++ {
		if i%7-3 < -2 {
			wantErrors++
		}
	}
	// With the compat core the extremes are bucket bounds (no
	// compare-and-swap before 5.12): exact here, as each of these small
	// integers has a bucket of its own.
	compat := c.Kernel().Core == kernel.CoreCompat
	if !metric.IsMetric() || metric.Count != 1000 || metric.Sum != atoi(q[1]) || metric.Min != atoi(q[2]) || metric.Max != atoi(q[3]) || metric.Errors != wantErrors {
		t.Errorf("queue_delta: kind %q count %d sum %d min %d max %d errors %d; want metric, 1000, %s, %s, %s, %d",
			metric.Kind, metric.Count, metric.Sum, metric.Min, metric.Max, metric.Errors, q[1], q[2], q[3], wantErrors)
	}
	if metric.P50 < -3 || metric.P50 > 3 {
		t.Errorf("queue_delta p50 %v outside [-3, 3]", metric.P50)
	}
	for d := 0; d < depth; d++ {
		key := strconv.Itoa(d)
		sr, ok := recs[key]
		if !ok {
			t.Errorf("no rec series for depth %d (have %v)", d, recs)
			continue
		}
		lo, hi := sorted(inner[key]), sorted(outer[key])
		if sr.Count != rounds {
			t.Errorf("depth %d: %d spans, want %d", d, sr.Count, rounds)
		}
		// The kernel's duration of each span lies between what the
		// program saw inside and outside the probes: so do the extremes
		// (with the compat core, within their buckets).
		if !extremesWithin(sr, lo[0], hi[0], lo[len(lo)-1], hi[len(hi)-1], compat) {
			t.Errorf("depth %d: min %d max %d, want min in [%d, %d] and max in [%d, %d]", d, sr.MinNs, sr.MaxNs, lo[0], hi[0], lo[len(lo)-1], hi[len(hi)-1])
		}
	}
	if st, _ := tr.Stats(); st.Unpaired != 0 || st.NestOverflow != 0 {
		t.Errorf("unpaired %d, overflow %d; want none", st.Unpaired, st.NestOverflow)
	}

	// Spans of two sources that interleave on one thread (op ends inside
	// txn, which began after it), for more rounds than a stack holds:
	// each pairs with its own start, and no round leaves anything behind.
	const rounds2 = 40
	var opIn, opOut, txIn, txOut []uint64
	for _, f := range svc.do(fmt.Sprintf("x %d %d", rounds2, 200)) {
		opIn, opOut = append(opIn, uint64(atoi(f[1]))), append(opOut, uint64(atoi(f[2])))
		txIn, txOut = append(txIn, uint64(atoi(f[3]))), append(txOut, uint64(atoi(f[4])))
	}
	s, err = c.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	byName := seriesByName(s)
	for _, w := range []struct {
		name    string
		in, out []uint64
	}{{"op", opIn, opOut}, {"txn", txIn, txOut}} {
		sr := byName[w.name]
		lo, hi := sorted(w.in), sorted(w.out)
		if sr.Count != rounds2 || !extremesWithin(sr, lo[0], hi[0], lo[len(lo)-1], hi[len(hi)-1], c.Kernel().Core == kernel.CoreCompat) {
			t.Errorf("%s: count %d min %d max %d; want %d, min in [%d, %d], max in [%d, %d]", w.name, sr.Count, sr.MinNs, sr.MaxNs, rounds2, lo[0], hi[0], lo[len(lo)-1], hi[len(hi)-1])
		}
	}
	if st, _ := tr.Stats(); st.Unpaired != 0 || st.NestOverflow != 0 {
		t.Errorf("after interleaved spans: unpaired %d, overflow %d; want none", st.Unpaired, st.NestOverflow)
	}

	// Deeper than a thread's stack (16): the 4 outermost starts of each
	// round give way to the innermost, whose spans pair exactly.
	const deep, deepRounds = 20, 2
	svc.do(fmt.Sprintf("d %d %d %d", deep, deepRounds, 100))
	s, err = c.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	got := map[int]uint64{}
	for _, sr := range s.Series {
		if sr.Span == "rec" && sr.Count > 0 {
			got[int(atoi(sr.SourceLabels["depth"]))] = sr.Count
		}
	}
	for d := 0; d < deep; d++ {
		want := uint64(deepRounds)
		if d < deep-16 {
			want = 0
		}
		if got[d] != want {
			t.Errorf("deep recursion, depth %d: %d spans, want %d", d, got[d], want)
		}
	}
	st, err := tr.Stats()
	if err != nil {
		t.Fatal(err)
	}
	if want := uint64((deep - 16) * deepRounds); st.NestOverflow != want || st.Unpaired != want {
		t.Errorf("overflow %d, unpaired %d; want %d of each", st.NestOverflow, st.Unpaired, want)
	}
	// The snapshot carries the source's health (source/usdt's Counts):
	// the window had all of them, none before it.
	if want := uint64((deep - 16) * deepRounds); s.Stats.SourceEvents["usdt/nest_overflow"] != want || s.Stats.SourceEvents["usdt/unpaired_end"] != want {
		t.Errorf("snapshot source events %v; want usdt/nest_overflow and usdt/unpaired_end %d", s.Stats.SourceEvents, want)
	}
	// ... and each source's own (stats.sources): all of them rec's, whose
	// ends fired twice per depth per round.
	if len(s.Stats.Sources) != len(srcs) {
		t.Errorf("snapshot sources %+v, want %d", s.Stats.Sources, len(srcs))
	}
	for _, h := range s.Stats.Sources {
		var lost, hits uint64
		if h.Name == "rec" {
			lost, hits = uint64((deep-16)*deepRounds), uint64(deep*deepRounds)
		}
		if h.Unpaired != lost || h.NestOverflow != lost || h.Hits != hits || h.Silent || h.Declared == "" {
			t.Errorf("source %+v over the deep window: want %d hits, %d unpaired ends and nest overflows, not silent, declared", h, hits, lost)
		}
	}
}

// extremesWithin reports whether a series' min lies in [minLo, minHi] and
// its max in [maxLo, maxHi]; with the compat core, whose extremes are the
// bounds of their buckets, whether those bounds' buckets reach the ranges.
func extremesWithin(sr snapshot.Series, minLo, minHi, maxLo, maxHi uint64, compat bool) bool {
	mn, mx := sr.MinNs, sr.MaxNs
	if compat {
		_, hi := snapshot.DurationBounds(snapshot.DurationIndex(mn))
		lo, _ := snapshot.DurationBounds(snapshot.DurationIndex(mx))
		return mn <= minHi && hi-1 >= minLo && mx >= maxLo && lo <= maxHi
	}
	return mn >= minLo && mn <= minHi && mx >= maxLo && mx <= maxHi
}
