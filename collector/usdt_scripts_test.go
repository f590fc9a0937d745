//go:build linux

package collector

import (
	"bufio"
	"context"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/spanwatch/spanwatch/internal/usdt"
	"github.com/spanwatch/spanwatch/snapshot"
	usdtsource "github.com/spanwatch/spanwatch/source/usdt"
)

// Debian's Ruby 3.1 and PHP 8.2 (the ruby and php-cli packages): their
// probes are in libruby and in the php binary.
var (
	rubyBin = "/usr/bin/ruby"
	libruby = "/usr/lib/" + debianMultiarch() + "/libruby-3.1.so.3.1"
	phpBin  = "/usr/bin/php8.2"
)

func debianMultiarch() string {
	if runtime.GOARCH == "arm64" {
		return "aarch64-linux-gnu"
	}
	return "x86_64-linux-gnu"
}

// callsRuby calls two methods of a class, alpha 5,000 times directly and
// 700 times through beta, after "go" on its standard input; with "tp" as
// its argument it enables an empty TracePoint on :call and :return
// first. With "loop" it calls them forever.
const callsRuby = `class Calls
  def alpha(i) i * 31 + 7 end
  def beta(i) alpha(i) + 1 end
end
$stdout.sync = true
c = Calls.new
x = 0
puts "ready"
if ARGV[0] == "loop"
  loop { 100.times { |i| x += c.beta(i) }; sleep 0.01 }
end
STDIN.gets
tp = TracePoint.new(:call, :return) {}
tp.enable if ARGV[0] == "tp"
5000.times { |i| x += c.alpha(i) }
700.times { |i| x += c.beta(i) }
tp.disable
puts "done #{x}"
`

// callsPHP is callsRuby in PHP: functions alpha and beta, the same counts.
const callsPHP = `<?php
function alpha($i) { return $i * 31 + 7; }
function beta($i) { return alpha($i) + 1; }
$x = 0;
echo "ready\n";
if (($argv[1] ?? "") == "loop") {
    for (;;) { for ($i = 0; $i < 100; $i++) $x += beta($i); usleep(10000); }
}
fgets(STDIN);
for ($i = 0; $i < 5000; $i++) $x += alpha($i);
for ($i = 0; $i < 700; $i++) $x += beta($i);
echo "done $x\n";
`

// scriptRuntime is one interpreter whose method probes fire only behind a
// switch the user must turn on.
type scriptRuntime struct {
	probes     string // the file holding the probes
	interp     string
	script     string
	ext        string
	entry, ret usdt.ProbeRef
	nameArgs   []usdt.StrArg
	sep        string
	hint       string   // in the silent source's hint
	on         []string // arguments turning the probes on
	onEnv      []string // environment turning the probes on
	names      map[string]uint64
}

// TestUSDTRubyMethods: Debian's Ruby 3.1 fires ruby:method__entry and
// method__return only while a TracePoint on :call/:return is enabled. A
// loop calling methods without one leaves the source silent past
// silent_after, with the TracePoint as the hint; with one, every call of
// Calls#alpha and Calls#beta is a span named class#method, exactly.
func TestUSDTRubyMethods(t *testing.T) {
	testScriptRuntime(t, scriptRuntime{
		probes: libruby, interp: rubyBin, script: callsRuby, ext: ".rb",
		entry:    usdt.ProbeRef{Provider: "ruby", Name: "method__entry"},
		ret:      usdt.ProbeRef{Provider: "ruby", Name: "method__return"},
		nameArgs: []usdt.StrArg{{Ptr: 0, Len: -1}, {Ptr: 1, Len: -1}}, sep: "#",
		hint: "TracePoint", on: []string{"tp"},
		names: map[string]uint64{"Calls#alpha": 5700, "Calls#beta": 700},
	})
}

// TestUSDTPHPFunctions: Debian's PHP 8.2 fires php:function__entry and
// function__return only with USE_ZEND_DTRACE=1 in its environment: silent
// without (the hint names it), exact spans per function with it.
func TestUSDTPHPFunctions(t *testing.T) {
	testScriptRuntime(t, scriptRuntime{
		probes: phpBin, interp: phpBin, script: callsPHP, ext: ".php",
		entry:    usdt.ProbeRef{Provider: "php", Name: "function__entry"},
		ret:      usdt.ProbeRef{Provider: "php", Name: "function__return"},
		nameArgs: []usdt.StrArg{{Ptr: 0, Len: -1}},
		hint:     "USE_ZEND_DTRACE=1", onEnv: []string{"USE_ZEND_DTRACE=1"},
		names: map[string]uint64{"alpha": 5700, "beta": 700},
	})
}

func testScriptRuntime(t *testing.T, rt scriptRuntime) {
	for _, p := range []string{rt.probes, rt.interp} {
		if _, err := os.Stat(p); err != nil {
			t.Skipf("no %s: install Debian's ruby and php-cli packages (.ci/install-deps.sh does)", p)
		}
	}
	requireBPF(t)
	script := filepath.Join(t.TempDir(), "calls"+rt.ext)
	if err := os.WriteFile(script, []byte(rt.script), 0o644); err != nil {
		t.Fatal(err)
	}
	c, err := New(context.Background(), Config{Sources: Sources{Marker: true}, ScanInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()

	// run starts the script and waits for its "ready".
	run := func(arg string, env []string) (*exec.Cmd, io.Writer, *bufio.Scanner) {
		t.Helper()
		cmd := exec.Command(rt.interp, script)
		if arg != "" {
			cmd.Args = append(cmd.Args, arg)
		}
		cmd.Env = append(os.Environ(), env...)
		cmd.Stderr = os.Stderr
		stdin, _ := cmd.StdinPipe()
		stdout, _ := cmd.StdoutPipe()
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
		out := bufio.NewScanner(stdout)
		if !out.Scan() || out.Text() != "ready" {
			t.Fatalf("%s said %q, want ready", rt.interp, out.Text())
		}
		return cmd, stdin, out
	}
	snap := func() *snapshot.Snapshot {
		t.Helper()
		s, err := c.Snapshot()
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	src := func(pid int) usdt.SpanSource {
		return usdt.SpanSource{
			PID: pid, Binary: rt.probes, NameArg: -1, KeyArg: -1, StatusArg: -1, DurationArg: -1, ValueArg: -1,
			NameArgs: rt.nameArgs, NameSeparator: rt.sep, Start: rt.entry, End: rt.ret,
		}
	}

	// Without the switch: a loop calling methods, and no hit.
	const silentAfter = 2 * time.Second
	s := src(0)
	s.SilentAfter = silentAfter
	silent, err := usdtsource.Attach(context.Background(), c.SourceCore(), []usdt.SpanSource{s})
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	loop, _, _ := run("loop", nil)
	time.Sleep(time.Until(start.Add(silentAfter + 500*time.Millisecond)))
	st := snap().Stats.Sources
	// Ruby's start-up (rubygems) unwinds a few methods by exception,
	// firing method__return without an entry: ends without a start make
	// no span, and the source is silent all the same.
	if len(st) != 1 || !st[0].Silent || st[0].Hits != st[0].Unpaired || st[0].Sites == 0 || !strings.Contains(st[0].Hint, rt.hint) {
		t.Errorf("%s calling methods in a loop without %s: sources %+v; want one silent, no paired end, the switch as hint", rt.interp, rt.hint, st)
	}
	t.Logf("without %s: %+v", rt.hint, st)
	loop.Process.Kill()
	loop.Wait()
	silent.Close()

	// With it: every call a span, by name.
	cmd, stdin, out := run(strings.Join(rt.on, " "), rt.onEnv)
	tr, err := usdtsource.Attach(context.Background(), c.SourceCore(), []usdt.SpanSource{src(cmd.Process.Pid)})
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	io.WriteString(stdin, "go\n")
	if !out.Scan() || !strings.HasPrefix(out.Text(), "done") {
		t.Fatalf("%s said %q, want done", rt.interp, out.Text())
	}
	series := seriesByName(snap())
	for name, want := range rt.names {
		if got := series[name].Count; got != want {
			t.Errorf("%s: %d spans, want %d", name, got, want)
		}
	}
	t.Logf("%d series from %s with %s%s", len(series), rt.interp, strings.Join(rt.on, " "), strings.Join(rt.onEnv, " "))
}
