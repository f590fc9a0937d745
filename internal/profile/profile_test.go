package profile

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	pprof "github.com/google/pprof/profile"

	"github.com/spanwatch/spanwatch/snapshot"
)

var t0 = time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC)

// fixture returns overruns of two spans: checkout twice with one stack
// (in two processes of one binary, loaded at different addresses; the
// first ended through the SDK, whose frames top its stack, and was sampled
// while it ran: on the CPU in main.spin, off it in time.Sleep), once still
// running with another stack, and one search overrun with a kernel stack
// and an unsymbolized library frame.
func fixture() []snapshot.Overrun {
	frame := func(base uint64, fn string, off uint64, line int) snapshot.Frame {
		return snapshot.Frame{Addr: base + off, Function: fn, File: "/src/app/main.go", Line: line, Module: "app", Offset: off, BuildID: "abc123"}
	}
	stackAt := func(base uint64) []snapshot.Frame {
		return []snapshot.Frame{frame(base, "main.slow", 0x1010, 26), frame(base, "main.c", 0x1100, 23), frame(base, "main.main", 0x1200, 13)}
	}
	sdk := []snapshot.Frame{
		{Addr: 0x400900, Function: "github.com/spanwatch/spanwatch/emit.marker", File: "/src/emit/marker_amd64.s", Line: 7, Module: "app", Offset: 0x900},
		{Addr: 0x400a00, Function: "github.com/spanwatch/spanwatch/emit.Span.End", File: "/src/emit/emit.go", Line: 40, Module: "app", Offset: 0xa00},
	}
	std := func(fn, file string, off uint64) snapshot.Frame {
		return snapshot.Frame{Addr: 0x400000 + off, Function: fn, File: file, Line: 1, Module: "app", Offset: off}
	}
	return []snapshot.Overrun{
		{Time: t0, Span: "checkout", PID: 10, Comm: "app", DurationNs: 300e6, TraceID: "aa", UserStack: append(sdk, stackAt(0x400000)...),
			Samples: []snapshot.Sample{
				{Count: 20, WeightNs: 200e6, UserStack: append([]snapshot.Frame{std("time.Now", "/go/src/time/time.go", 0x50), frame(0x400000, "main.spin", 0x1000, 30)}, stackAt(0x400000)...)},
				{Count: 1, WeightNs: 50e6, OffCPU: true, UserStack: append([]snapshot.Frame{std("runtime.gopark", "/go/src/runtime/proc.go", 0x60), std("time.Sleep", "/go/src/runtime/time.go", 0x70)}, stackAt(0x400000)...)},
			}},
		{Time: t0.Add(time.Second), Span: "checkout", PID: 11, Comm: "app", DurationNs: 500e6, TraceID: "bb", UserStack: stackAt(0x7f0000000000)},
		{Time: t0.Add(2 * time.Second), Span: "checkout", PID: 10, Comm: "app", DurationNs: 100e6, StillRunning: true,
			UserStack: []snapshot.Frame{frame(0x400000, "main.other", 0x1300, 40), frame(0x400000, "main.main", 0x1210, 14)}},
		{Time: t0.Add(3 * time.Second), Span: "search", PID: 12, Comm: "db", DurationNs: 50e6,
			KernelStack: []snapshot.Frame{{Addr: 0xffffffff81001234, Function: "vfs_read", Module: "kernel", Offset: 0x14}},
			UserStack: []snapshot.Frame{
				{Addr: 0x7f00001234, Module: "libfoo.so", Offset: 0x1234},
				{Addr: 0x5000, Function: "query;run", Module: "db", Offset: 0x5000},
			},
			StackError: "user stack stops after 2 frames"},
	}
}

func TestAggregate(t *testing.T) {
	got := Aggregate(fixture())
	type summary struct {
		span      string
		kind      Kind
		count     uint64
		total     uint64
		max       uint64
		unsampled uint64
		running   uint64
		traces    string
		innerFn   string
		trimmed   int
		stackErr  string
	}
	want := []summary{
		{"checkout", KindEnd, 2, 800e6, 500e6, 550e6, 0, "aa,bb", "main.slow", 2, ""},
		{"checkout", KindOnCPU, 20, 200e6, 0, 0, 0, "", "time.Now", 0, ""},
		{"checkout", KindEnd, 1, 100e6, 100e6, 100e6, 1, "", "main.other", 0, ""},
		{"checkout", KindOffCPU, 1, 50e6, 0, 0, 0, "", "runtime.gopark", 0, ""},
		{"search", KindEnd, 1, 50e6, 50e6, 50e6, 0, "", "", 0, "user stack stops after 2 frames"},
	}
	if len(got) != len(want) {
		t.Fatalf("got %d stacks, want %d: %+v", len(got), len(want), got)
	}
	for i, w := range want {
		g := got[i]
		s := summary{g.Span, g.Kind, g.Count, g.TotalNs, g.MaxNs, g.UnsampledNs, g.StillRunning, strings.Join(g.TraceIDs, ","), g.UserStack[0].Function, g.Trimmed, g.StackError}
		if s != w {
			t.Errorf("stack %d = %+v, want %+v", i, s, w)
		}
	}
	// The raw record keeps the SDK's frames.
	if f := fixture()[0].UserStack[0].Function; !strings.HasSuffix(f, "emit.marker") {
		t.Errorf("fixture's own stack starts with %s", f)
	}
}

func TestFolded(t *testing.T) {
	stacks := Aggregate(fixture())
	end := "checkout;" + FrameAtEnd + ";main.main;main.c;main.slow"
	spin := "checkout;main.main;main.c;main.slow;main.spin;time.Now"
	sleep := "checkout;main.main;main.c;main.slow;time.Sleep;runtime.gopark;" + FrameOffCPU
	other := "checkout;" + FrameRunning + ";main.main;main.other"
	search := "search;" + FrameAtEnd + ";query:run;libfoo.so+0x1234;vfs_read_[k]"
	for _, tc := range []struct {
		v    Value
		want string
	}{
		{ValueCount, end + " 2\n" + other + " 1\n" + search + " 1\n"},
		// By time, what no sample covers is the span's [not sampled]
		// (merged over its end stacks), never the end stack's frames.
		{ValueDuration, "checkout;" + FrameNotSampled + " 650000000\n" + spin + " 200000000\n" + sleep + " 50000000\n" + "search;" + FrameNotSampled + " 50000000\n"},
		{ValueSamples, spin + " 20\n" + sleep + " 1\n"},
	} {
		var b bytes.Buffer
		if err := WriteFolded(&b, stacks, tc.v); err != nil {
			t.Fatal(err)
		}
		if b.String() != tc.want {
			t.Errorf("folded %s:\n%s\nwant:\n%s", tc.v, b.String(), tc.want)
		}
	}
	if err := WriteFolded(&bytes.Buffer{}, stacks, "bytes"); err == nil {
		t.Error("WriteFolded accepted value \"bytes\"")
	}
}

func TestJSON(t *testing.T) {
	overruns := fixture()
	var b bytes.Buffer
	if err := WriteJSON(&b, "checkout", overruns, Aggregate(overruns)); err != nil {
		t.Fatal(err)
	}
	var r Report
	if err := json.Unmarshal(b.Bytes(), &r); err != nil {
		t.Fatal(err)
	}
	if r.Span != "checkout" || r.Overruns != 4 || len(r.Stacks) != 5 || r.Stacks[0].UserStack[1].Function != "main.c" || r.Stacks[4].KernelStack[0].Function != "vfs_read" {
		t.Errorf("round trip: %+v", r)
	}
	if len(r.Spans) != 2 || r.Spans[0].Span != "checkout" || r.Spans[0].Overruns != 3 || r.Spans[0].DurationNs != 900e6 ||
		r.Spans[0].Samples != 21 || r.Spans[0].SampledNs != 250e6 || r.Spans[0].OffCPUNs != 50e6 ||
		len(r.Spans[0].Hottest) != 2 || r.Spans[0].Hottest[0].Frame.Function != "main.spin" {
		t.Errorf("span summaries: %+v", r.Spans)
	}
}

func TestSelect(t *testing.T) {
	all := fixture()
	all = append(all, snapshot.Overrun{Span: "check*"})
	for _, tc := range []struct {
		name string
		glob bool
		want int
	}{
		{"", false, 5}, {"checkout", false, 3}, {"check*", false, 1}, {"check*", true, 4},
		{"s?arch", false, 0}, {"s?arch", true, 1}, {"nothing", true, 0}, {"!checkout", true, 2}, {"*e*", true, 5},
	} {
		got, err := Select(all, tc.name, tc.glob)
		if err != nil || len(got) != tc.want {
			t.Errorf("Select(%q, glob %v) = %d overruns, %v; want %d", tc.name, tc.glob, len(got), err, tc.want)
		}
	}
	if _, err := Select(all, `check\`, true); err == nil {
		t.Error("Select accepted a bad glob")
	}
}

func TestRead(t *testing.T) {
	overruns := fixture()
	var in bytes.Buffer
	// An indented snapshot, as Snapshot.Encode writes it, then JSON lines
	// of a snapshot and of two bare overruns.
	s1 := &snapshot.Snapshot{Version: snapshot.Version, Time: t0, WindowNs: 1e9, Series: []snapshot.Series{}, Overruns: overruns[:2]}
	if err := s1.Encode(&in); err != nil {
		t.Fatal(err)
	}
	line, _ := json.Marshal(&snapshot.Snapshot{Version: snapshot.Version, Time: t0, Series: []snapshot.Series{}, Overruns: overruns[2:3]})
	in.Write(append(line, '\n'))
	line, _ = json.Marshal(overruns[3])
	in.Write(append(line, '\n'))
	got, err := Read(&in)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 4 {
		t.Fatalf("read %d overruns, want 4", len(got))
	}
	for i := range got {
		if got[i].Span != overruns[i].Span || got[i].DurationNs != overruns[i].DurationNs || len(got[i].UserStack) != len(overruns[i].UserStack) {
			t.Errorf("overrun %d = %+v, want %+v", i, got[i], overruns[i])
		}
	}
	for _, bad := range []string{`{"foo": 1}`, `{"version": 99, "series": []}`, `{"span": "x", "bogus": 1}`, `[1]`, `{"span": `} {
		if _, err := Read(strings.NewReader(bad)); err == nil {
			t.Errorf("Read(%q) succeeded", bad)
		}
	}
}

func TestPprof(t *testing.T) {
	overruns := fixture()
	stacks := Aggregate(overruns)
	start, end := TimeRange(overruns)
	p, err := Pprof(stacks, start, end)
	if err != nil {
		t.Fatal(err)
	}
	if p.TimeNanos != t0.UnixNano() || p.DurationNanos != int64(3*time.Second) {
		t.Errorf("time %d+%d, want %d+%d", p.TimeNanos, p.DurationNanos, t0.UnixNano(), 3*time.Second)
	}
	s0 := p.Sample[0]
	// The end stacks count overruns, not time: the time no sample
	// covers is each span's [not sampled], one sample a span after the
	// stacks.
	if len(p.Sample) != 7 || s0.Value[0] != 2 || s0.Value[1] != 0 || s0.Value[2] != 0 || s0.Label["span"][0] != "checkout" || s0.Label["kind"][0] != "end" {
		t.Errorf("first sample: %+v", s0)
	}
	// The root is the span, then the end marker; main.main at one module
	// offset is one location, shared by the two processes.
	n := len(s0.Location)
	if got := s0.Location[n-1].Line[0].Function.Name; got != "checkout" {
		t.Errorf("root frame %q, want checkout", got)
	}
	if got := s0.Location[n-2].Line[0].Function.Name; got != FrameAtEnd {
		t.Errorf("second frame %q, want %s", got, FrameAtEnd)
	}
	if got := s0.Location[n-3]; got.Line[0].Function.Name != "main.main" || got.Address != 0x1200 || got.Mapping.BuildID != "abc123" {
		t.Errorf("outer location: %+v", got)
	}
	if got := p.Sample[3].Location[0].Line[0].Function.Name; got != FrameOffCPU || p.Sample[3].Value[1] != 1 {
		t.Errorf("off-CPU sample: leaf %q, values %v", got, p.Sample[3].Value)
	}
	if got := p.Sample[4].Location[0]; got.Line[0].Function.Name != "vfs_read" || got.Mapping.File != kernelMapping {
		t.Errorf("kernel leaf: %+v, mapping %+v", got.Line, got.Mapping)
	}
	if got := p.Sample[4].Location[1].Line[0].Function.Name; got != "libfoo.so+0x1234" {
		t.Errorf("unsymbolized frame named %q, want libfoo.so+0x1234", got)
	}
	for i, want := range []struct {
		span string
		ns   int64
	}{{"checkout", 650e6}, {"search", 50e6}} {
		s := p.Sample[5+i]
		if s.Value[0] != 0 || s.Value[1] != 0 || s.Value[2] != want.ns || s.Label["span"][0] != want.span || len(s.Location) != 2 ||
			s.Location[0].Line[0].Function.Name != FrameNotSampled || s.Location[1].Line[0].Function.Name != want.span {
			t.Errorf("not-sampled sample %d: %+v, want %s %d ns", i, s, want.span, want.ns)
		}
	}

	// It survives a write and a parse.
	var b bytes.Buffer
	if err := p.Write(&b); err != nil {
		t.Fatal(err)
	}
	q, err := pprof.Parse(bytes.NewReader(b.Bytes()))
	if err != nil {
		t.Fatal(err)
	}
	if len(q.Sample) != 7 || len(q.Location) != len(p.Location) {
		t.Errorf("parsed %d samples, %d locations; want 7, %d", len(q.Sample), len(q.Location), len(p.Location))
	}

	// And "go tool pprof -top" reads it: [not sampled] holds the 700ms
	// no sample covers, time.Now is the leaf of the on-CPU samples
	// (200ms); the spans' roots hold all 950ms cumulatively.
	gobin, err := exec.LookPath("go")
	if err != nil {
		t.Skipf("skipping go tool pprof: %v", err)
	}
	path := filepath.Join(t.TempDir(), "stacks.pb.gz")
	if err := os.WriteFile(path, b.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(gobin, "tool", "pprof", "-top", path).CombinedOutput()
	if err != nil {
		t.Fatalf("go tool pprof -top: %v\n%s", err, out)
	}
	flat, cum := map[string]string{}, map[string]string{}
	for line := range strings.SplitSeq(string(out), "\n") {
		if f := strings.Fields(line); len(f) >= 6 && strings.HasSuffix(f[1], "%") {
			name := strings.Join(f[5:], " ")
			flat[name], cum[name] = f[0], f[3]
		}
	}
	if flat[FrameNotSampled] != "700ms" || flat["main.slow"] != "0" || flat["time.Now"] != "200ms" || cum["checkout"] != "900ms" || cum["search"] != "50ms" {
		t.Errorf("pprof -top: %s flat %q (want 700ms), main.slow flat %q (0: the end stacks hold no time), time.Now flat %q (200ms), checkout cum %q (900ms), search cum %q (50ms):\n%s",
			FrameNotSampled, flat[FrameNotSampled], flat["main.slow"], flat["time.Now"], cum["checkout"], cum["search"], out)
	}
	out, err = exec.Command(gobin, "tool", "pprof", "-top", "-sample_index=overruns", "-tagfocus=span=search", path).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "vfs_read") || strings.Contains(string(out), "main.slow") {
		t.Errorf("pprof -tagfocus span=search: %v\n%s", err, out)
	}
}

// TestPprofInlined checks that calls inlined at one address become one
// location with a line each, innermost first, as pprof represents them.
func TestPprofInlined(t *testing.T) {
	stack := []snapshot.Frame{
		{Addr: 0x1010, Function: "main.slow", File: "main.go", Line: 30, Module: "app", Offset: 0x1010},
		{Addr: 0x1100, Function: "main.d", File: "main.go", Line: 27, Module: "app", Offset: 0x1100, Inlined: true},
		{Addr: 0x1100, Function: "main.c", File: "main.go", Line: 24, Module: "app", Offset: 0x1100},
		{Addr: 0x1200, Function: "main.main", File: "main.go", Line: 14, Module: "app", Offset: 0x1200},
	}
	p, err := Pprof(Aggregate([]snapshot.Overrun{{Span: "s", DurationNs: 5, UserStack: stack}}), time.Time{}, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	locs := p.Sample[0].Location
	// main.slow, main.d inlined in main.c, main.main, the end marker,
	// the span.
	if len(locs) != 5 {
		t.Fatalf("%d locations, want 5", len(locs))
	}
	var got []string
	for _, ln := range locs[1].Line {
		got = append(got, fmt.Sprintf("%s:%d", ln.Function.Name, ln.Line))
	}
	if strings.Join(got, ",") != "main.d:27,main.c:24" || locs[1].Address != 0x1100 {
		t.Errorf("inlined location: %v at %#x, want main.d:27,main.c:24 at 0x1100", got, locs[1].Address)
	}
	if p.TimeNanos != 0 {
		t.Errorf("time %d for overruns without times", p.TimeNanos)
	}
}

func TestText(t *testing.T) {
	var b bytes.Buffer
	overruns := fixture()
	if err := WriteText(&b, overruns, Aggregate(overruns), 2); err != nil {
		t.Fatal(err)
	}
	want := `checkout: 3 overruns, 900ms total, 500ms max, 1 still running
  21 samples in the span cover 250ms (28%), 50ms of it off the CPU; hottest:
     22% main.spin (/src/app/main.go:30) on-CPU, in time.Now
      6% main.slow (/src/app/main.go:26) off-CPU, in runtime.gopark
  at the end: 2 overruns, 800ms total, 500ms max, 550ms not sampled (app)
      main.slow (/src/app/main.go:26)
      main.c (/src/app/main.go:23)
      ... 1 more
  on the CPU: 20 samples, 200ms (app)
      time.Now (/go/src/time/time.go:1)
      main.spin (/src/app/main.go:30)
      ... 3 more
  at the end: 1 overrun (1 still running), 100ms total, 100ms max (app)
      main.other (/src/app/main.go:40)
      main.main (/src/app/main.go:14)
  off the CPU: 1 sample, 50ms (app)
      runtime.gopark (/go/src/runtime/proc.go:1)
      time.Sleep (/go/src/runtime/time.go:1)
      ... 3 more

search: 1 overrun, 50ms total, 50ms max
  at the end: 1 overrun, 50ms total, 50ms max (db)
    ! user stack stops after 2 frames
      vfs_read
      libfoo.so+0x1234
      ... 1 more
`
	if b.String() != want {
		t.Errorf("text:\n%s\nwant:\n%s", b.String(), want)
	}
}
