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
// (in two processes of one binary, loaded at different addresses), once
// with another stack, and one search overrun with a kernel stack and an
// unsymbolized library frame.
func fixture() []snapshot.Overrun {
	frame := func(base uint64, fn string, off uint64, line int) snapshot.Frame {
		return snapshot.Frame{Addr: base + off, Function: fn, File: "/src/app/main.go", Line: line, Module: "app", Offset: off, BuildID: "abc123"}
	}
	stackAt := func(base uint64) []snapshot.Frame {
		return []snapshot.Frame{frame(base, "main.slow", 0x1010, 26), frame(base, "main.c", 0x1100, 23), frame(base, "main.main", 0x1200, 13)}
	}
	return []snapshot.Overrun{
		{Time: t0, Span: "checkout", PID: 10, Comm: "app", DurationNs: 300e6, TraceID: "aa", UserStack: stackAt(0x400000)},
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
		span     string
		count    uint64
		total    uint64
		max      uint64
		running  uint64
		traces   string
		innerFn  string
		stackErr string
	}
	want := []summary{
		{"checkout", 2, 800e6, 500e6, 0, "aa,bb", "main.slow", ""},
		{"checkout", 1, 100e6, 100e6, 1, "", "main.other", ""},
		{"search", 1, 50e6, 50e6, 0, "", "", "user stack stops after 2 frames"},
	}
	if len(got) != len(want) {
		t.Fatalf("got %d stacks, want %d: %+v", len(got), len(want), got)
	}
	for i, w := range want {
		g := got[i]
		s := summary{g.Span, g.Count, g.TotalNs, g.MaxNs, g.StillRunning, strings.Join(g.TraceIDs, ","), g.UserStack[0].Function, g.StackError}
		if s != w {
			t.Errorf("stack %d = %+v, want %+v", i, s, w)
		}
	}
}

func TestFolded(t *testing.T) {
	stacks := Aggregate(fixture())
	for _, tc := range []struct {
		v    Value
		want string
	}{
		{ValueCount, "main.main;main.c;main.slow 2\nmain.main;main.other 1\nquery:run;libfoo.so+0x1234;vfs_read_[k] 1\n"},
		{ValueDuration, "main.main;main.c;main.slow 800000000\nmain.main;main.other 100000000\nquery:run;libfoo.so+0x1234;vfs_read_[k] 50000000\n"},
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
	if err := WriteJSON(&b, "checkout", len(overruns), Aggregate(overruns)); err != nil {
		t.Fatal(err)
	}
	var r Report
	if err := json.Unmarshal(b.Bytes(), &r); err != nil {
		t.Fatal(err)
	}
	if r.Span != "checkout" || r.Overruns != 4 || len(r.Stacks) != 3 || r.Stacks[0].UserStack[1].Function != "main.c" || r.Stacks[2].KernelStack[0].Function != "vfs_read" {
		t.Errorf("round trip: %+v", r)
	}
}

func TestSelect(t *testing.T) {
	all := fixture()
	for _, tc := range []struct {
		pattern string
		want    int
	}{{"", 4}, {"checkout", 3}, {"check*", 3}, {"s?arch", 1}, {"nothing", 0}, {"!checkout", 1}, {"*e*", 4}} {
		got, err := Select(all, tc.pattern)
		if err != nil || len(got) != tc.want {
			t.Errorf("Select(%q) = %d overruns, %v; want %d", tc.pattern, len(got), err, tc.want)
		}
	}
	if _, err := Select(all, `check\`); err == nil {
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
	if len(p.Sample) != 3 || p.Sample[0].Value[0] != 2 || p.Sample[0].Value[1] != 800e6 || p.Sample[0].Label["span"][0] != "checkout" {
		t.Errorf("first sample: %+v", p.Sample[0])
	}
	// main.main at one module offset is one location, shared by the two
	// processes; the kernel frame is the leaf of its sample.
	if got := p.Sample[0].Location[2]; got.Line[0].Function.Name != "main.main" || got.Address != 0x1200 || got.Mapping.BuildID != "abc123" {
		t.Errorf("outer location: %+v", got)
	}
	if got := p.Sample[2].Location[0]; got.Line[0].Function.Name != "vfs_read" || got.Mapping.File != kernelMapping {
		t.Errorf("kernel leaf: %+v, mapping %+v", got.Line, got.Mapping)
	}
	if got := p.Sample[2].Location[1].Line[0].Function.Name; got != "libfoo.so+0x1234" {
		t.Errorf("unsymbolized frame named %q, want libfoo.so+0x1234", got)
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
	if len(q.Sample) != 3 || len(q.Location) != len(p.Location) {
		t.Errorf("parsed %d samples, %d locations; want 3, %d", len(q.Sample), len(q.Location), len(p.Location))
	}

	// And "go tool pprof -top" reads it: main.slow is the leaf of the
	// 800ms stack, 800ms flat.
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
	var flat string
	for line := range strings.SplitSeq(string(out), "\n") {
		if f := strings.Fields(line); len(f) >= 6 && f[5] == "main.slow" {
			flat = f[0]
		}
	}
	if flat != "800ms" {
		t.Errorf("pprof -top: main.slow flat %q, want 800ms:\n%s", flat, out)
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
	if len(locs) != 3 {
		t.Fatalf("%d locations, want 3", len(locs))
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
	if err := WriteText(&b, Aggregate(fixture()), 2); err != nil {
		t.Fatal(err)
	}
	want := `checkout (app): 2 overruns, 800ms total, 500ms max
    main.slow (/src/app/main.go:26)
    main.c (/src/app/main.go:23)
    ... 1 more

checkout (app): 1 overrun, 100ms total, 100ms max, 1 still running
    main.other (/src/app/main.go:40)
    main.main (/src/app/main.go:14)

search (db): 1 overrun, 50ms total, 50ms max
  ! user stack stops after 2 frames
    vfs_read
    libfoo.so+0x1234
    ... 1 more
`
	if b.String() != want {
		t.Errorf("text:\n%s\nwant:\n%s", b.String(), want)
	}
}
