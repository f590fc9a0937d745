//go:build linux

package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/spanwatch/spanwatch/internal/symbolize"
	"github.com/spanwatch/spanwatch/snapshot"
)

// ownStack returns this goroutine's stack, symbolized from /proc/self by
// the symbolizer, as the collector would record it.
//
//go:noinline
func ownStack(t *testing.T) []snapshot.Frame {
	pcs := make([]uintptr, 64)
	n := runtime.Callers(1, pcs) // ownStack first
	addrs := make([]uint64, n)
	for i, pc := range pcs[:n] {
		addrs[i] = uint64(pc)
	}
	s := symbolize.New(symbolize.Config{})
	defer s.Close()
	if err := s.Capture(uint32(os.Getpid())); err != nil {
		t.Skipf("skipping: cannot read /proc/self: %v", err)
	}
	frames, err := s.User(uint32(os.Getpid()), addrs)
	if err != nil {
		t.Fatal(err)
	}
	return frames
}

// TestStacks records overruns with real symbolized stacks into a file as
// JSON lines and turns them into each output format.
func TestStacks(t *testing.T) {
	frames := ownStack(t)
	// runtime.Callers is inlined into ownStack (except under -race); a
	// test binary names package main by its import path.
	own := frames
	if !raceEnabled {
		if frames[0].Function != "runtime.Callers" || !frames[0].Inlined {
			t.Fatalf("own stack starts %s; want runtime.Callers (inlined)", frames[0])
		}
		own = frames[1:]
	}
	if !strings.HasSuffix(own[0].Function, "spanwatch.ownStack") || !strings.HasSuffix(own[1].Function, "spanwatch.TestStacks") {
		t.Fatalf("own stack goes on %s, %s; want ownStack, TestStacks", own[0], own[1])
	}
	dir := t.TempDir()
	input := filepath.Join(dir, "run.jsonl")
	var in bytes.Buffer
	enc := json.NewEncoder(&in)
	t0 := time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC)
	enc.Encode(&snapshot.Snapshot{Version: snapshot.Version, Time: t0, WindowNs: 1e9, Series: []snapshot.Series{}, Overruns: []snapshot.Overrun{
		{Time: t0, Span: "checkout", PID: 1, Comm: "shop", DurationNs: 300e6, UserStack: frames},
		{Time: t0, Span: "checkout", PID: 1, Comm: "shop", DurationNs: 200e6, UserStack: frames},
	}})
	enc.Encode(&snapshot.Overrun{Time: t0.Add(time.Second), Span: "search", PID: 2, Comm: "shop", DurationNs: 100e6, UserStack: frames[1:]})
	if err := os.WriteFile(input, in.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}

	var folded []string
	for i := len(frames) - 1; i >= 0; i-- {
		folded = append(folded, frames[i].Function)
	}
	t.Run("folded", func(t *testing.T) {
		out := filepath.Join(dir, "checkout.folded")
		runOK(t, "stacks", "--input", input, "--span", "checkout", "--format", "folded", "--output", out)
		// No in-span samples: by time, all of it is [not sampled]; the
		// end stack counts the overruns.
		want := "checkout;[not sampled] 500000000\n"
		if got := readFile(t, out); got != want {
			t.Errorf("folded:\n%s\nwant:\n%s", got, want)
		}
		runOK(t, "stacks", "--input", input, "--span", "checkout", "--format", "folded", "--value", "count", "--output", out)
		want = "checkout;[stack at span end];" + strings.Join(folded, ";") + " 2\n"
		if got := readFile(t, out); got != want {
			t.Errorf("folded by count:\n%s\nwant:\n%s", got, want)
		}
	})
	t.Run("json", func(t *testing.T) {
		out := filepath.Join(dir, "all.json")
		runOK(t, "stacks", "--input", input, "--format", "json", "--output", out)
		var r struct {
			Overruns int
			Spans    []struct{ Span string }
			Stacks   []struct {
				Span    string
				Count   int
				TotalNs int64 `json:"total_ns"`
			}
		}
		if err := json.Unmarshal([]byte(readFile(t, out)), &r); err != nil {
			t.Fatal(err)
		}
		if r.Overruns != 3 || len(r.Stacks) != 2 || r.Stacks[0].Span != "checkout" || r.Stacks[0].Count != 2 || r.Stacks[0].TotalNs != 500e6 || r.Stacks[1].Span != "search" || len(r.Spans) != 2 {
			t.Errorf("json report: %+v", r)
		}
	})
	t.Run("pprof", func(t *testing.T) {
		out := filepath.Join(dir, "checkout.pb.gz")
		runOK(t, "stacks", "--input", input, "--span", "check*", "--glob", "--format", "pprof", "--output", out)
		gobin, err := exec.LookPath("go")
		if err != nil {
			t.Skipf("skipping go tool pprof: %v", err)
		}
		b, err := exec.Command(gobin, "tool", "pprof", "-top", out).CombinedOutput()
		if err != nil {
			t.Fatalf("go tool pprof -top: %v\n%s", err, b)
		}
		// Without in-span samples, [not sampled] holds all 500ms flat;
		// by overruns, the leaf of the end stack (runtime.Callers inlined
		// in ownStack) holds both.
		flatOf := func(out []byte, name string) string {
			for line := range strings.SplitSeq(string(out), "\n") {
				if f := strings.Fields(line); len(f) >= 6 && strings.TrimSuffix(strings.Join(f[5:], " "), " (inline)") == name {
					return f[0]
				}
			}
			return ""
		}
		if flat := flatOf(b, "[not sampled]"); flat != "500ms" {
			t.Errorf("pprof -top: [not sampled] flat %q, want 500ms:\n%s", flat, b)
		}
		b, err = exec.Command(gobin, "tool", "pprof", "-top", "-sample_index=overruns", out).CombinedOutput()
		if err != nil {
			t.Fatalf("go tool pprof -top: %v\n%s", err, b)
		}
		if flat := flatOf(b, frames[0].Function); flat != "2" {
			t.Errorf("pprof -top -sample_index=overruns: %s flat %q, want 2:\n%s", frames[0].Function, flat, b)
		}
	})
	t.Run("text", func(t *testing.T) {
		out := filepath.Join(dir, "search.txt")
		runOK(t, "stacks", "--input", input, "--span", "search", "--format", "text", "--depth", "1", "--output", out)
		want := fmt.Sprintf("search: 1 overrun, 100ms total, 100ms max\n  at the end: 1 overrun, 100ms total, 100ms max (shop)\n      %s\n      ... %d more\n", frames[1], len(frames)-2)
		if got := readFile(t, out); got != want {
			t.Errorf("text:\n%s\nwant:\n%s", got, want)
		}
	})
	t.Run("svg", func(t *testing.T) {
		out := filepath.Join(dir, "all.svg")
		runOK(t, "stacks", "--input", input, "--format", "svg", "--output", out)
		svg := readFile(t, out)
		for _, want := range []string{"<svg ", "Where the time went: all spans, 2026-12-02 12:00:00 to 12:00:01", "<title>checkout — 500ms (83.3%)</title>", "</svg>"} {
			if !strings.Contains(svg, want) {
				t.Errorf("svg lacks %q", want)
			}
		}
		out = filepath.Join(dir, "search.html")
		runOK(t, "stacks", "--input", input, "--span", "search", "--format", "html", "--title", "search stacks", "--output", out)
		if page := readFile(t, out); !strings.Contains(page, "<title>search stacks</title>") || !strings.Contains(page, "<td>search</td>") || strings.Contains(page, "<td>checkout</td>") {
			t.Errorf("html page:\n%s", page)
		}
	})
	t.Run("errors", func(t *testing.T) {
		for _, tc := range []struct {
			args []string
			code int
			want string
		}{
			{[]string{"stacks", "--input", input, "--span", "nothing"}, 1, "it has overruns of: checkout, search"},
			{[]string{"stacks", "--input", input, "--format", "png"}, 2, "want folded, pprof, json, text, svg or html"},
			{[]string{"stacks", "--input", input, "--span", "check*"}, 1, "add --glob to match it as a glob"},
			{[]string{"stacks", "--input", input, "--value", "bytes"}, 2, "want \"duration\", \"count\" or \"samples\""},
			{[]string{"stacks", "--input", filepath.Join(dir, "missing")}, 1, "no such file"},
		} {
			var stdout, stderr bytes.Buffer
			if code := run(tc.args, &stdout, &stderr); code != tc.code || !strings.Contains(stderr.String(), tc.want) {
				t.Errorf("%v: exit %d, stderr %q; want %d and %q", tc.args, code, stderr.String(), tc.code, tc.want)
			}
		}
	})
}

func runOK(t *testing.T, args ...string) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	if code := run(args, &stdout, &stderr); code != 0 {
		t.Fatalf("spanwatch %v: exit %d\n%s", args, code, stderr.String())
	}
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
