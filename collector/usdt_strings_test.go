//go:build linux

package collector

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"maps"
	"os/exec"
	"slices"
	"strings"
	"testing"

	"github.com/spanwatch/spanwatch/internal/bpftest"
	"github.com/spanwatch/spanwatch/internal/kernel"
	"github.com/spanwatch/spanwatch/internal/srcspec"
	"github.com/spanwatch/spanwatch/internal/usdt"
	usdtsource "github.com/spanwatch/spanwatch/source/usdt"
)

// TestUSDTStringNames names spans from string arguments given as a
// pointer and a length (slices of one buffer, never NUL-terminated, as
// the JVM passes class and method names), from two of them joined by a
// separator, and with a per-source prefix; lengths past the name buffer
// are clamped and a negative one is a "?". Each name must come out exact,
// with its count, on every object and read method.
func TestUSDTStringNames(t *testing.T) {
	prog := bpftest.CProgram(t, "sdtstrings")
	requireBPF(t)
	auto, compat := Config{}, Config{Core: kernel.CoreCompat}
	attach := func(cfg usdt.TracerConfig) func(*Collector, []usdt.SpanSource) (*usdtsource.Source, error) {
		return func(c *Collector, srcs []usdt.SpanSource) (*usdtsource.Source, error) {
			return usdtsource.AttachWith(context.Background(), c.SourceCore(), cfg, srcs)
		}
	}
	for _, tc := range []struct {
		name  string
		cfg   Config
		tcfg  usdt.TracerConfig
		needs []kernel.Feature
	}{
		{"default", auto, usdt.TracerConfig{}, nil},
		// As on kernels before 6.0: ordinary programs read the strings.
		{"no-sleepable", auto, usdt.TracerConfig{NoSleepable: true}, nil},
		{"copy-from-user", auto, usdt.TracerConfig{NoStrKfunc: true}, []kernel.Feature{kernel.SleepableUprobe}},
		// The 5.10 objects, with and without cookies.
		{"compat", compat, usdt.TracerConfig{}, nil},
		{"compat-no-cookies", compat, usdt.TracerConfig{NoCookies: true}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, f := range tc.needs {
				bpftest.Require(t, f)
			}
			testUSDTStringNames(t, prog, tc.cfg, attach(tc.tcfg))
		})
	}
}

func testUSDTStringNames(t *testing.T, prog string, cfg Config, attach func(*Collector, []usdt.SpanSource) (*usdtsource.Source, error)) {
	cfg.Sources, cfg.ScanInterval = Sources{Marker: true}, -1
	c, err := New(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()

	cmd := exec.Command(prog)
	stdin, _ := cmd.StdinPipe()
	stdout, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	out := bufio.NewScanner(stdout)
	if !out.Scan() || out.Text() != "ready" {
		t.Fatalf("program said %q, want ready", out.Text())
	}
	none := usdt.SpanSource{NameArg: -1, KeyArg: -1, StatusArg: -1, DurationArg: -1, ValueArg: -1}
	method, single, keyed := none, none, none
	method.Binary = prog
	method.NameArgs = []usdt.StrArg{{Ptr: 1, Len: 2}, {Ptr: 3, Len: 4}}
	method.NameSeparator = "."
	method.Start = usdt.ProbeRef{Provider: "sw", Name: "m_entry"}
	method.End = usdt.ProbeRef{Provider: "sw", Name: "m_return"}
	single.Binary = prog
	single.NameArgs = []usdt.StrArg{{Ptr: 0, Len: 1}}
	single.Prefix = "c:"
	single.Probe = usdt.ProbeRef{Provider: "sw", Name: "str"}
	keyed.PID = cmd.Process.Pid
	keyed.NameArgs = []usdt.StrArg{{Ptr: 1, Len: -1}, {Ptr: 2, Len: 3}}
	keyed.NameSeparator = " "
	keyed.Prefix = "http."
	keyed.KeyArg = 0
	keyed.Start = usdt.ProbeRef{Provider: "sw", Name: "k_entry"}
	keyed.End = usdt.ProbeRef{Provider: "sw", Name: "k_return"}
	// Labels from both probes of a pair: op is the start's argument,
	// kept with the open span (nested ones too) until its end.
	labelled, labelledKey := none, none
	labelled.Binary, labelledKey.Binary = prog, prog
	labelled.Span, labelledKey.Span = "q", "r"
	labelled.Start = usdt.ProbeRef{Provider: "sw", Name: "q_start"}
	labelled.End = usdt.ProbeRef{Provider: "sw", Name: "q_done"}
	labelledKey.Start = usdt.ProbeRef{Provider: "sw", Name: "r_start"}
	labelledKey.End = usdt.ProbeRef{Provider: "sw", Name: "r_done"}
	labelledKey.KeyArg = 0
	for _, s := range []*usdt.SpanSource{&labelled, &labelledKey} {
		s.StartArgs = []int{1}
		s.Labels.List = []srcspec.Label{
			{Name: "op", Operand: usdt.StartOperand, OperandName: "start.arg1"},
			{Name: "status", Operand: 1, OperandName: "arg1"},
		}
	}
	sources := []usdt.SpanSource{method, single, keyed, labelled, labelledKey}
	tr, err := attach(c, sources)
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	if _, err := c.Snapshot(); err != nil { // start a fresh window
		t.Fatal(err)
	}
	io.WriteString(stdin, "go\n")
	if !out.Scan() || out.Text() != "done" {
		t.Fatalf("program said %q, want done", out.Text())
	}
	if err := cmd.Wait(); err != nil {
		t.Fatal(err)
	}
	s, err := c.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]uint64{}
	for _, sr := range s.Series {
		if sr.Count == 0 {
			continue
		}
		name := sr.Span
		if sr.Span == "q" || sr.Span == "r" {
			name = fmt.Sprintf("%s op=%s status=%s", sr.Span, sr.SourceLabels["op"], sr.SourceLabels["status"])
		}
		got[name] += sr.Count
	}
	want := map[string]uint64{
		"java/lang/String.charAt":        15,
		"java/lang/StringBuilder.append": 5,
		"java/lang/StringBuilder.charAt": 7,
		strings.Repeat("x", 125) + ".c":  3,
		"c:charAt":                       4,
		"c:" + strings.Repeat("x", 125):  2,
		"c:?":                            3,
		"c:":                             1,
		"http.GET java/lang/String":      6,
		"q op=0 status=0":                2, // i = 0, 6
		"q op=0 status=1":                2, // 3, 9
		"q op=1 status=0":                2, // 4, 10
		"q op=1 status=1":                2, // 1, 7
		"q op=2 status=0":                2, // 2, 8
		"q op=2 status=1":                2, // 5, 11
		"q op=7 status=0":                3,
		"r op=1 status=0":                2, // 1, 5
		"r op=0 status=0":                2, // 2, 4
		"r op=1 status=1":                1, // 3
		"r op=0 status=1":                1, // 6
	}
	if !maps.Equal(got, want) {
		names := slices.Sorted(maps.Keys(got))
		for _, n := range names {
			t.Logf("got %q: %d", n, got[n])
		}
		t.Errorf("series %v, want %v", got, want)
	}
	hs, err := tr.Hits()
	if err != nil {
		t.Fatal(err)
	}
	for i, want := range []uint64{30, 10, 6, 15, 6} {
		if hs[i].Hits != want || hs[i].Unpaired != 0 {
			t.Errorf("%s: %d hits, %d unpaired; want %d, 0", hs[i].Source.Describe(), hs[i].Hits, hs[i].Unpaired, want)
		}
	}
}
