//go:build linux

package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/hex"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/spanwatch/spanwatch/source/tracepoint"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"
	"gopkg.in/yaml.v3"

	"github.com/spanwatch/spanwatch/collector"
	"github.com/spanwatch/spanwatch/config/section"
	"github.com/spanwatch/spanwatch/emit"
	"github.com/spanwatch/spanwatch/internal/eventheader"
	"github.com/spanwatch/spanwatch/internal/eventheader/ehtest"
	"github.com/spanwatch/spanwatch/internal/tpsource"
	"github.com/spanwatch/spanwatch/snapshot"
	"github.com/spanwatch/spanwatch/userevents"
)

// syncBuffer is a log sink the tests read while the collector writes.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// tpRig is a collector with tracepoint sources from a sources: section.
type tpRig struct {
	c       *collector.Collector
	tp      *tracepoint.Source
	logs    *syncBuffer
	byLabel map[string]snapshot.Series // "span label=value", from the last series()
	mu      sync.Mutex
	ovs     []snapshot.Overrun
}

func newTPRig(t *testing.T, sources string) *tpRig {
	t.Helper()
	require(t)
	r := &tpRig{logs: &syncBuffer{}}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("collector log:\n%s", r.logs.String())
		}
	})
	log := slog.New(slog.NewTextHandler(r.logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	c, err := collector.New(context.Background(), collector.Config{
		Logger: log, Sources: collector.Sources{UserEvents: true}, ScanInterval: -1,
		OnOverrun: func(o snapshot.Overrun) { r.mu.Lock(); r.ovs = append(r.ovs, o); r.mu.Unlock() },
	})
	if err != nil {
		t.Fatalf("start collector: %v", err)
	}
	t.Cleanup(func() { c.Close() })
	var node yaml.Node
	if err := yaml.Unmarshal([]byte(sources), &node); err != nil {
		t.Fatal(err)
	}
	// The lists of the sources: section, as package config hands them
	// to internal/tpsource.
	d := section.NewDecoder("rules.yaml", nil)
	var srcs []tpsource.Source
	for m, i := node.Content[0], 0; i+1 < len(m.Content); i += 2 {
		srcs = append(srcs, tpsource.DecodeSources(d, tpsource.Kind(m.Content[i].Value), m.Content[i+1])...)
	}
	if err := d.Err(); err != nil {
		t.Fatal(err)
	}
	tp, err := tracepoint.Attach(context.Background(), c.SourceCore(), srcs, tracepoint.Config{
		DiscoverInterval: 100 * time.Millisecond, MissingAfter: 2 * time.Second,
	})
	if err != nil {
		t.Fatalf("attach tracepoint sources: %v", err)
	}
	t.Cleanup(func() { tp.Close() })
	r.c, r.tp = c, tp
	return r
}

func (r *tpRig) overruns() []snapshot.Overrun {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.ovs)
}

// series sums a snapshot's series by span name.
func (r *tpRig) series(t *testing.T) map[string]snapshot.Series {
	t.Helper()
	s, err := r.c.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]snapshot.Series{}
	r.byLabel = map[string]snapshot.Series{}
	for _, sr := range s.Series {
		for k, v := range sr.SourceLabels {
			key := sr.Span + " " + k + "=" + v
			b := r.byLabel[key]
			b.Count += sr.Count
			b.Errors += sr.Errors
			r.byLabel[key] = b
		}
		o := out[sr.Span]
		o.Span = sr.Span
		o.Count += sr.Count
		o.Errors += sr.Errors
		o.SumNs += sr.SumNs
		o.OverBudget += sr.OverBudget
		o.MaxNs = max(o.MaxNs, sr.MaxNs)
		out[sr.Span] = o
	}
	return out
}

// runProg runs the test program that registers its own user_events.
func runProg(t *testing.T, args ...string) (pid int, done string) {
	t.Helper()
	cmd := exec.Command("testdata/uevprog.static", args...)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start testdata/uevprog.static (built by test/vm/run-all.sh): %v", err)
	}
	sc := bufio.NewScanner(out)
	var lines []string
	for sc.Scan() {
		lines = append(lines, sc.Text())
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("uevprog %v: %v (said %q)", args, err, lines)
	}
	if len(lines) != 2 || lines[0] != "registered" {
		t.Fatalf("uevprog said %q", lines)
	}
	return cmd.Process.Pid, lines[1]
}

// TestUserEventsOwnABI: a C program registers its own user_event with the
// kernel's ABI (DIAG_IOCSREG, writev) after the collector started; the
// collector finds it, casts it by its format's offsets, and counts every
// span exactly, with its errors, budget overruns and stacks reaching main.
// A source whose event never appears is reported.
func TestUserEventsOwnABI(t *testing.T) {
	r := newTPRig(t, `
user_events:
  - event: uev_req
    name_field: route
    duration_field: dur_ns
    error: "status >= 500"
    labels: {status: status}
  - event: uev_never
    span: never
    duration_field: d
`)
	if err := r.c.SetBudgets([]collector.BudgetRule{{Span: "/slow", Budget: 10 * time.Millisecond}}); err != nil {
		t.Fatal(err)
	}
	pid, done := runProg(t, "single", "1000")
	if done != "done 1003" {
		t.Fatalf("uevprog: %s", done)
	}
	got := r.series(t)
	var sumA, sumB uint64
	for i := uint64(1); i <= 1000; i++ {
		if i%2 == 1 {
			sumA += i * 1000
		} else {
			sumB += i * 1000
		}
	}
	for name, w := range map[string][4]uint64{ // count, errors, sum, over budget
		"/a": {500, 0, sumA, 0}, "/b": {500, 100, sumB, 0}, "/slow": {3, 0, 150_000_000, 3},
	} {
		sr := got[name]
		if sr.Count != w[0] || sr.Errors != w[1] || sr.SumNs != w[2] || sr.OverBudget != w[3] {
			t.Errorf("%s: %+v, want count %d errors %d sum %d over budget %d", name, sr, w[0], w[1], w[2], w[3])
		}
	}
	// Errors are exactly the status >= 500 ones, in their own label.
	if g := r.byLabel["/b status=503"]; g.Count != 100 || g.Errors != 100 {
		t.Errorf("/b status 503: %+v, want 100 spans, all errors", g)
	}
	if g := r.byLabel["/b status=200"]; g.Count != 400 || g.Errors != 0 {
		t.Errorf("/b status 200: %+v, want 400 spans, no errors", g)
	}
	var ovs []snapshot.Overrun
	for deadline := time.Now().Add(5 * time.Second); len(ovs) < 3 && time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		ovs = r.overruns()
	}
	if len(ovs) != 3 {
		t.Fatalf("%d overruns, want 3", len(ovs))
	}
	for _, o := range ovs {
		var funcs []string
		for _, f := range o.UserStack {
			funcs = append(funcs, f.Function)
		}
		if o.Span != "/slow" || o.PID != uint32(pid) || o.DurationNs != 50_000_000 || o.Source != "user_event_fields" {
			t.Errorf("overrun %+v", o)
		}
		for _, want := range []string{"slow_leaf", "slow_mid", "main"} {
			if !slices.Contains(funcs, want) {
				t.Errorf("overrun stack %v lacks %s (%s)", funcs, want, o.StackError)
			}
		}
	}
	counts, err := r.tp.Counts()
	if err != nil {
		t.Fatal(err)
	}
	if counts["user_events/ok"] != 1003 || len(counts) != 1 {
		t.Errorf("counts %v, want user_events/ok 1003 alone", counts)
	}
	// The source of an event nobody registers is reported missing.
	for deadline := time.Now().Add(5 * time.Second); !strings.Contains(r.logs.String(), "tracepoint_source_missing") && time.Now().Before(deadline); {
		time.Sleep(50 * time.Millisecond)
	}
	st := r.tp.Status()
	if len(st[0].Tracepoints) != 1 || st[0].Tracepoints[0] != "user_events:uev_req" || len(st[1].Tracepoints) != 0 {
		t.Errorf("status %+v", st)
	}
	if !strings.Contains(r.logs.String(), `msg=tracepoint_source_missing source="user_events span never (uev_never)"`) {
		t.Errorf("no missing-source warning in the log:\n%s", r.logs.String())
	}
}

// TestUserEventsOwnABIPair: a start and an end event of the C program,
// paired by a request id field (two requests open at once, ended in
// reverse order), timed in the kernel.
func TestUserEventsOwnABIPair(t *testing.T) {
	r := newTPRig(t, `
user_events:
  - start: uev_begin
    end: uev_end
    key_field: req_id
    name_field: route
    status_field: failed
`)
	if _, done := runProg(t, "pair", "200"); done != "done 200" {
		t.Fatalf("uevprog: %s", done)
	}
	sr := r.series(t)["/job"]
	if sr.Count != 200 || sr.Errors != 40 {
		t.Fatalf("/job: %+v, want 200 spans, 40 errors", sr)
	}
	// Each request slept 1 ms between its start and its end.
	if sr.SumNs < 200*uint64(time.Millisecond) || sr.SumNs > 200*uint64(time.Second) {
		t.Errorf("/job: %d ns in 200 spans of about 1 ms", sr.SumNs)
	}
	if counts, _ := r.tp.Counts(); counts["user_events/ok"] != 400 || counts["user_events/unpaired_end"] != 0 {
		t.Errorf("counts %v", counts)
	}
}

// ehWriter writes EventHeader events the way the Rust exporter does, from
// this process.
type ehWriter struct {
	ev *userevents.Event
}

// newEHWriter registers provider's tracepoint and returns once tp has
// bound it on every CPU: the kernel
// sets a user_event's enable bit when the first CPU's perf event
// registers, and an event written on a CPU whose perf event is not open
// yet reaches no program (user_event_perf looks at this CPU's list only),
// so Enabled alone let the first events of a test be lost.
func newEHWriter(t testing.TB, provider string, tp *tracepoint.Source) *ehWriter {
	t.Helper()
	ev, err := userevents.Register(ehtest.Format(provider))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ev.Close() })
	for deadline := time.Now().Add(5 * time.Second); !ev.Enabled(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%s never enabled: the collector did not pick it up", ehtest.TracepointName(provider))
		}
	}
	name := ehtest.TracepointName(provider)
	for deadline := time.Now().Add(5 * time.Second); !tracepointBound(tp, name); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%s enabled but not bound on every CPU after 5s: %+v", name, tp.Status())
		}
	}
	return &ehWriter{ev: ev}
}

// tracepointBound reports whether a source of tp reads the tracepoint
// named name (bound after its perf event opened on every online CPU).
func tracepointBound(tp *tracepoint.Source, name string) bool {
	for _, st := range tp.Status() {
		for _, ev := range st.Tracepoints {
			if ev == name || strings.HasSuffix(ev, ":"+name) {
				return true
			}
		}
	}
	return false
}

func (w *ehWriter) write(t *testing.T, p []byte) {
	t.Helper()
	if err := w.ev.Write(p); err != nil {
		t.Fatal(err)
	}
}

//go:noinline
func writeSlowEHSpan(t *testing.T, w *ehWriter, x *ehtest.Exporter, s *ehtest.Span) {
	p, err := x.Encode(s)
	if err != nil {
		t.Fatal(err)
	}
	w.write(t, p)
}

// TestEventHeaderExporterSpans: spans written as the OpenTelemetry Rust
// user_events exporter writes them arrive with exact counts, durations,
// errors where success is false, the trace id on an overrun and the
// writer's stack; malformed events are counted by reason and never
// aggregated.
func TestEventHeaderExporterSpans(t *testing.T) {
	r := newTPRig(t, `
eventheader:
  - provider: spanwatch_e2e_otel
`)
	if err := r.c.SetBudgets([]collector.BudgetRule{{Span: "eh.slow", Budget: 10 * time.Millisecond}}); err != nil {
		t.Fatal(err)
	}
	w := newEHWriter(t, "spanwatch_e2e_otel", r.tp)
	// The golden spans, byte for byte.
	for _, tc := range ehtest.GoldenCases {
		p, err := ehtest.Golden(tc.File)
		if err != nil {
			t.Fatal(err)
		}
		w.write(t, p)
	}
	// 1000 spans of i µs, every 10th failed, from both exporter versions.
	base := time.Date(2026, 1, 1, 23, 59, 59, 999_000_000, time.UTC) // crosses midnight from i=1000 on
	var sum uint64
	for i := 1; i <= 1000; i++ {
		x := ehtest.Exporter{Version: ehtest.Version(i % 2), CloudRole: "e2e"}
		s := ehtest.Span{Name: "eh.span", Start: base, End: base.Add(time.Duration(i) * time.Microsecond), Kind: 1,
			TraceID: [16]byte{15: byte(i)}, SpanID: [8]byte{7: byte(i)}, Attributes: []ehtest.KV{{Key: "http.response.status_code", Value: int64(200)}}}
		if i%10 == 0 {
			s.Status = ehtest.StatusError
		}
		sum += uint64(i) * 1000
		p, err := x.Encode(&s)
		if err != nil {
			t.Fatal(err)
		}
		w.write(t, p)
	}
	slow := ehtest.Span{Name: "eh.slow", Start: base, End: base.Add(25 * time.Millisecond),
		TraceID: [16]byte{0: 0xab, 15: 0xcd}, SpanID: [8]byte{0: 0x11}}
	x := &ehtest.Exporter{Version: ehtest.RustMain}
	writeSlowEHSpan(t, w, x, &slow)

	// Malformed events.
	good, _ := ehtest.Golden("basic_main.golden")
	mut := func(f func(p []byte) []byte) []byte { return f(append([]byte(nil), good...)) }
	at := func(p []byte, s string) int { return bytes.Index(p, []byte(s)) }
	bad := map[string][]byte{
		"truncated_metadata": mut(func(p []byte) []byte { p[8], p[9] = 0xff, 0x0f; return p }),
		"bad_struct":         mut(func(p []byte) []byte { p[at(p, "PartA\x00")+7] = 5; return p }),
		"missing_field":      mut(func(p []byte) []byte { p[at(p, "PartA\x00")+7] = 2; return p }),
		"bad_time":           mut(func(p []byte) []byte { p[at(p, "2025-07-10T23:04:08.109839907Z")+10] = ' '; return p }),
		"bad_id":             mut(func(p []byte) []byte { p[at(p, "0af76519")] = 'x'; return p }),
	}
	for _, p := range bad {
		w.write(t, p)
	}

	got := r.series(t)
	if sr := got["eh.span"]; sr.Count != 1000 || sr.Errors != 100 || sr.SumNs != sum {
		t.Errorf("eh.span: %+v, want 1000 spans, 100 errors, %d ns", sr, sum)
	}
	for _, tc := range ehtest.GoldenCases {
		want, _ := eventheader.DecodeSpan(mustGolden(t, tc.File), 127)
		sr := got[want.Name]
		wantErr := uint64(0)
		if !want.Success {
			wantErr = 1
		}
		if sr.Count != 1 || sr.SumNs != want.DurationNs || sr.Errors != wantErr {
			t.Errorf("golden %s: %+v, want 1 span of %d ns, %d errors", tc.File, sr, want.DurationNs, wantErr)
		}
	}
	if sr := got["eh.slow"]; sr.Count != 1 || sr.OverBudget != 1 {
		t.Errorf("eh.slow: %+v", sr)
	}
	counts, err := r.tp.Counts()
	if err != nil {
		t.Fatal(err)
	}
	wantCounts := map[string]uint64{"eventheader/ok": 1000 + uint64(len(ehtest.GoldenCases)) + 1}
	for reason := range bad {
		wantCounts["eventheader/"+reason] = 1
	}
	for k, v := range wantCounts {
		if counts[k] != v {
			t.Errorf("%s = %d, want %d (all: %v)", k, counts[k], v, counts)
		}
	}
	if len(counts) != len(wantCounts) {
		t.Errorf("counts %v, want %v", counts, wantCounts)
	}
	var ovs []snapshot.Overrun
	for deadline := time.Now().Add(5 * time.Second); len(ovs) == 0 && time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		ovs = r.overruns()
	}
	if len(ovs) != 1 {
		t.Fatalf("%d overruns, want 1", len(ovs))
	}
	o := ovs[0]
	if o.Span != "eh.slow" || o.TraceID != hex.EncodeToString(slow.TraceID[:]) || o.SpanID != hex.EncodeToString(slow.SpanID[:]) ||
		o.DurationNs != uint64(25*time.Millisecond) || o.PID != uint32(os.Getpid()) || o.Source != "eventheader" {
		t.Errorf("overrun %+v", o)
	}
	var funcs []string
	for _, f := range o.UserStack {
		funcs = append(funcs, f.Function)
	}
	if !slices.Contains(funcs, "github.com/spanwatch/spanwatch/test/vm/e2e.writeSlowEHSpan") {
		t.Errorf("overrun stack lacks the writer: %v (%s)", funcs, o.StackError)
	}
}

func mustGolden(t *testing.T, name string) []byte {
	t.Helper()
	p, err := ehtest.Golden(name)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// setOnline takes a CPU offline or brings it back.
func setOnline(t *testing.T, cpu int, on bool) {
	t.Helper()
	v := "0"
	if on {
		v = "1"
	}
	if err := os.WriteFile(fmt.Sprintf("/sys/devices/system/cpu/cpu%d/online", cpu), []byte(v), 0); err != nil {
		t.Fatalf("cpu %d online=%s: %v", cpu, v, err)
	}
}

// TestCPUHotplug: a CPU taken offline and brought back loses its perf
// events (the kernel detaches them for good); the collector finds that,
// reopens them within a second, counts the gap, and spans written on that
// CPU afterwards, both on the span user_event and on a tracepoint source,
// all arrive. Both ways are tested: back before the next check (found by
// the perf events' enabled time standing still), and after it.
func TestCPUHotplug(t *testing.T) {
	if os.Getenv(inVM) != "1" {
		// It takes a CPU offline: never on the machine that runs the tests.
		t.Skip("takes cpu1 offline: runs only in the VM (test/vm)")
	}
	if _, err := os.Stat("/sys/devices/system/cpu/cpu1/online"); err != nil {
		if os.Getenv(inVM) == "1" {
			t.Fatalf("cpu1 cannot be taken offline here: %v", err)
		}
		t.Skipf("cpu1 cannot be taken offline here: %v", err)
	}
	onlineCPUs(t)
	r := newTPRig(t, `
eventheader:
  - provider: spanwatch_e2e_hotplug
`)
	w := newEHWriter(t, "spanwatch_e2e_hotplug", r.tp)
	x := ehtest.Exporter{Version: ehtest.RustMain}
	ehSpan := func(name string) []byte {
		p, err := x.Encode(&ehtest.Span{Name: name, Start: time.Unix(10, 0), End: time.Unix(10, 1000)})
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	for round, wait := range []time.Duration{0, 3 * time.Second} {
		gaps, tpGaps := r.c.UserEventsCPUGaps(), r.tp.CPUGaps()
		setOnline(t, 1, false)
		time.Sleep(wait)
		setOnline(t, 1, true)
		for deadline := time.Now().Add(5 * time.Second); r.c.UserEventsCPUGaps() == gaps || r.tp.CPUGaps() == tpGaps; time.Sleep(20 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("round %d: no gap found in 5 s (span event %d, tracepoints %d)", round, r.c.UserEventsCPUGaps(), r.tp.CPUGaps())
			}
		}
		name := fmt.Sprintf("hotplug.%d", round)
		onCPU(t, 1, func() {
			recordSpans(name, 500)
			for i := 0; i < 300; i++ {
				w.write(t, ehSpan("eh."+name))
			}
		})
		got := r.series(t)
		if g := got[name]; g.Count != 500 {
			t.Errorf("round %d: %d of 500 spans written on cpu 1 after it came back", round, g.Count)
		}
		if g := got["eh."+name]; g.Count != 300 {
			t.Errorf("round %d: %d of 300 EventHeader spans written on cpu 1 after it came back", round, g.Count)
		}
	}
	if !strings.Contains(r.logs.String(), "msg=cpu_perf_events_reopened cpu=1") {
		t.Errorf("no reopening logged:\n%s", r.logs.String())
	}
}

// progStats returns the run count and total run time of the newest loaded
// BPF program whose name is one of names (cilium/ebpf reads the full name
// from BTF; the kernel's own copy keeps 15 bytes). Needs
// BPF statistics on for the time (BPF_ENABLE_STATS, an fd).
func progStats(b testing.TB, names ...string) (cnt uint64, ns time.Duration) {
	b.Helper()
	var best ebpf.ProgramID
	for id, err := ebpf.ProgramGetNextID(0); err == nil; id, err = ebpf.ProgramGetNextID(id) {
		p, err := ebpf.NewProgramFromID(id)
		if err != nil {
			continue
		}
		info, err := p.Info()
		p.Close()
		if err == nil && id > best && slices.ContainsFunc(names, func(n string) bool {
			return n == info.Name || len(info.Name) == 15 && strings.HasPrefix(n, info.Name)
		}) {
			best = id
		}
	}
	if best == 0 {
		b.Fatalf("no BPF program named %v", names)
	}
	p, err := ebpf.NewProgramFromID(best)
	if err != nil {
		b.Fatal(err)
	}
	defer p.Close()
	st, err := p.Stats()
	if err != nil {
		b.Fatal(err)
	}
	return st.RunCount, st.Runtime
}

// BenchmarkEventHeaderDecoderCost measures the EventHeader decoder's own
// cost per event (kernel BPF stats: run_time_ns / run_cnt) against the
// fixed-struct user_events program's, each on its own events in one run:
// b.N spans through the span SDK (struct span_event cast in place), then
// b.N Span events as the Rust exporter writes them (basic_main.golden: 12
// fields, PartB.success the 12th), then b.N with cloud role fields, a
// parent, a link and attributes (full_main.golden).
func BenchmarkEventHeaderDecoderCost(b *testing.B) {
	if os.Geteuid() != 0 || emit.Mode() != "user_events" {
		if os.Getenv(inVM) == "1" {
			b.Fatalf("%s=1 but the span SDK uses %s", inVM, emit.Mode())
		}
		b.Skip("needs root and user_events")
	}
	// BPF_ENABLE_STATS: on while the fd is open, off when it closes,
	// however the benchmark ends (never a sysctl left changed).
	stats, err := ebpf.EnableStats(uint32(unix.BPF_STATS_RUN_TIME))
	if err != nil {
		b.Fatal(err)
	}
	defer stats.Close()
	c, err := collector.New(context.Background(), collector.Config{Sources: collector.Sources{UserEvents: true}, ScanInterval: -1})
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	tp, err := tracepoint.Attach(context.Background(), c.SourceCore(), []tpsource.Source{{Kind: tpsource.EventHeader, Provider: "spanwatch_e2e_bench"}},
		tracepoint.Config{DiscoverInterval: 50 * time.Millisecond})
	if err != nil {
		b.Fatal(err)
	}
	defer tp.Close()
	w := newEHWriter(b, "spanwatch_e2e_bench", tp)
	core := []string{"fentry_perf_tp_event", "kprobe_perf_tp_event"}
	eh := []string{"eh_fentry_perf_tp_event", "eh_kprobe_perf_tp_event"}
	f := &emit.Finished{Name: "bench.fixed", Duration: time.Millisecond}
	phase := func(names []string, write func()) float64 {
		c0, t0 := progStats(b, names...)
		for range b.N {
			write()
		}
		c1, t1 := progStats(b, names...)
		if c1-c0 < uint64(b.N) {
			b.Fatalf("%v ran %d times for %d events", names, c1-c0, b.N)
		}
		return float64(t1-t0) / float64(c1-c0)
	}
	b.ResetTimer()
	basic := mustGoldenB(b, "basic_main.golden")
	full := mustGoldenB(b, "full_main.golden")
	// Alternating rounds, medians: TCG's translation of new code and the
	// host's load move single phases a lot.
	var fs, bs, fl []float64
	for range 5 {
		fs = append(fs, phase(core, func() { emit.Record(f) }))
		bs = append(bs, phase(eh, func() { w.ev.Write(basic) }))
		fl = append(fl, phase(eh, func() { w.ev.Write(full) }))
	}
	b.StopTimer()
	med := func(x []float64) float64 { slices.Sort(x); return x[len(x)/2] }
	fixed, ehBasic, ehFull := med(fs), med(bs), med(fl)
	counts, _ := tp.Counts()
	if counts["eventheader/ok"] < uint64(10*b.N) {
		b.Fatalf("decoded %v for %d events", counts, 10*b.N)
	}
	b.ReportMetric(fixed, "fixed-ns/run")
	b.ReportMetric(ehBasic, "eh-basic-ns/run")
	b.ReportMetric(ehFull, "eh-full-ns/run")
	b.ReportMetric(ehBasic/fixed, "basic/fixed")
	b.ReportMetric(ehFull/fixed, "full/fixed")
}

func mustGoldenB(b testing.TB, name string) []byte {
	p, err := ehtest.Golden(name)
	if err != nil {
		b.Fatal(err)
	}
	return p
}

// TestUserEventsMultiFormat: one name registered in two formats with
// USER_EVENT_REG_MULTI_FORMAT (6.9+) is two tracepoints in
// user_events_multi (NAME.ID), each bound by its own format's offsets.
func TestUserEventsMultiFormat(t *testing.T) {
	r := newTPRig(t, `
user_events:
  - event: uev_multi
    span: multi
    duration_field: dur_ns
    status_field: failed
`)
	if _, done := runProg(t, "multi", "300"); done != "done 600" {
		t.Fatalf("uevprog: %s", done)
	}
	if sr := r.series(t)["multi"]; sr.Count != 600 || sr.Errors != 150 || sr.SumNs != 600_000 {
		t.Errorf("multi: %+v, want 600 spans of 1000 ns, 150 errors", sr)
	}
	if st := r.tp.Status(); len(st[0].Tracepoints) != 2 || !strings.HasPrefix(st[0].Tracepoints[0], "user_events_multi:uev_multi.") {
		t.Errorf("status %+v", st)
	}
}

// progSays runs uevprog and returns the first line it printed.
func progSays(t *testing.T, args ...string) string {
	t.Helper()
	out, err := exec.Command("testdata/uevprog.static", args...).Output()
	if err != nil {
		t.Fatalf("uevprog %v: %v (%q)", args, err, out)
	}
	first, _, _ := strings.Cut(string(out), "\n")
	return first
}

// TestKernelFact_WatchedEventKeepsItsFormat: while spanwatch holds perf
// events on a user_event, the kernel keeps the event after the process
// that registered it exits, so a program that registers the name again
// with another format is refused (EADDRINUSE); once spanwatch lets go,
// the event is deleted and the new format registers.
// (docs/tracepoint-sources.md tells programs to use
// USER_EVENT_REG_MULTI_FORMAT.) The registering is done by other
// processes: a process's user_events_data descriptor keeps a reference on
// every event registered through it until it is closed.
func TestKernelFact_WatchedEventKeepsItsFormat(t *testing.T) {
	r := newTPRig(t, `
user_events:
  - event: uev_fmt
    span: fmt
    duration_field: a
`)
	if got := progSays(t, "fmt", "a"); got != "registered" {
		t.Fatalf("format a: %s", got)
	}
	if got := progSays(t, "fmt", "b"); got != "eaddrinuse" {
		t.Fatalf("format b while spanwatch watches the event: %s, want eaddrinuse (kernel %s changed?)", got, uname())
	}
	r.tp.Close()
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		got := progSays(t, "fmt", "b")
		if got == "registered" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("format b after spanwatch let go: %s", got)
		}
	}
}
