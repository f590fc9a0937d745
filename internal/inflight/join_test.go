package inflight

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/spanwatch/spanwatch/snapshot"
)

func stack(fns ...string) []snapshot.Frame {
	var out []snapshot.Frame
	for i, fn := range fns {
		out = append(out, snapshot.Frame{Addr: uint64(0x1000*(len(fn)+1) + i), Function: fn})
	}
	return out
}

// rec builds a record of span name in process 1, thread tid: a sample
// (elapsed ms into the span) or an end (duration ms).
func rec(name string, tid uint32, sample, off bool, startNs, monoStart uint64, ms uint64, fns ...string) Record {
	return Record{
		Overrun: snapshot.Overrun{Span: name, NameID: uint64(len(name)), PID: 1, TID: tid, DurationNs: ms * 1e6,
			StillRunning: sample, UserStack: stack(fns...)},
		Sample: sample, OffCPU: off, StartNs: startNs, MonoStartNs: monoStart,
	}
}

func summary(o snapshot.Overrun) string {
	var parts []string
	for _, s := range o.Samples {
		state := "on"
		if s.OffCPU {
			state = "off"
		}
		parts = append(parts, fmt.Sprintf("%s:%s:%dx%dms", s.UserStack[0].Function, state, s.Count, s.WeightNs/1e6))
	}
	return strings.Join(parts, " ")
}

func TestJoiner(t *testing.T) {
	const ms = uint64(time.Millisecond)
	type step struct {
		r      Record
		report string // "" nothing reported; else the span and its samples
	}
	for _, tc := range []struct {
		name  string
		cfg   JoinConfig
		steps []step
	}{
		{"samples join the end by the SDK's start", JoinConfig{}, []step{
			{rec("charge", 7, true, false, 42, 1000, 110, "main.spin"), "charge running: "},
			{rec("charge", 8, true, false, 42, 1000, 120, "main.spin"), ""},     // the goroutine moved to thread 8
			{rec("charge", 8, true, true, 42, 1000, 130, "time.Sleep"), ""},     // off the CPU
			{rec("other", 7, false, false, 43, 5000, 400, "main.x"), "other: "}, // another span: untouched
			{rec("charge", 9, false, false, 42, 1000, 300, "main.end"), "charge: time.Sleep:off:1x170ms main.spin:on:2x20ms"},
			{rec("charge", 9, false, false, 42, 1000, 300, "main.end"), "charge: "}, // samples go to one end only
		}},
		{"an SDK span whose name grew by its end", JoinConfig{}, []step{
			{rec("GET", 7, true, false, 42, 1000, 110, "main.load"), "GET running: "},
			{rec("GET /orders/{id}", 7, false, false, 42, 1000, 200, "end"), "GET /orders/{id}: main.load:on:1x90ms"},
		}},
		{"USDT spans pair by thread and start time", JoinConfig{}, []step{
			{rec("q", 3, true, false, 0, 1000*ms, 150, "slow"), "q running: "},
			{rec("q", 4, true, false, 0, 1000*ms, 150, "other_thread"), "q running: "}, // same name and start, another thread: another span
			{rec("q", 3, true, false, 0, 1000*ms, 160, "slow"), ""},
			{rec("q", 3, false, false, 0, 1000*ms+500e3, 200, "done"), "q: slow:on:2x50ms"}, // end's start 0.5ms late: within tolerance
			{rec("q", 4, false, false, 0, 2000*ms, 200, "done"), "q: "},                     // 1s away: not its span
		}},
		{"nested spans of one name pair with the nearest start", JoinConfig{}, []step{
			{rec("r", 3, true, false, 0, 1000*ms, 150, "outer"), "r running: "},
			{rec("r", 3, true, false, 0, 1001*ms, 149, "inner"), "r running: "},
			{rec("r", 3, false, false, 0, 1001*ms+100e3, 160, "end_inner"), "r: inner:on:1x11ms"},
			{rec("r", 3, false, false, 0, 1000*ms+100e3, 170, "end_outer"), "r: outer:on:1x20ms"},
		}},
		{"a sample after its span's end is dropped", JoinConfig{}, []step{
			{rec("q", 3, true, false, 0, 1000*ms, 150, "slow"), "q running: "},
			{rec("q", 3, false, false, 0, 1000*ms+200e3, 200, "done"), "q: slow:on:1x50ms"},
			{rec("q", 3, true, false, 0, 1000*ms, 201, "late"), ""},
			{rec("sdk", 5, false, false, 77, 9, 200, "done"), "sdk: "},
			{rec("sdk", 6, true, false, 77, 9, 201, "late"), ""},
			{rec("sdk", 6, true, false, 78, 9, 201, "next"), "sdk running: "},
		}},
		{"gaps are bounded by MaxGap", JoinConfig{MaxGap: 50 * time.Millisecond}, []step{
			{rec("s", 1, true, true, 9, 0, 100, "read"), "s running: "},
			{rec("s", 1, false, false, 9, 0, 1000, "end"), "s: read:off:1x50ms"},
		}},
		{"MaxSamples bounds a span", JoinConfig{MaxSamples: 2}, []step{
			{rec("s", 1, true, false, 9, 0, 100, "a"), "s running: "},
			{rec("s", 1, true, false, 9, 0, 110, "a"), ""},
			{rec("s", 1, true, false, 9, 0, 120, "a"), ""},
			{rec("s", 1, false, false, 9, 0, 130, "end"), "s: a:on:2x30ms"},
		}},
		{"MaxSpans: reported, not kept", JoinConfig{MaxSpans: 1}, []step{
			{rec("s", 1, true, false, 9, 0, 100, "a"), "s running: "},
			{rec("t", 1, true, false, 10, 0, 100, "b"), "t running: "},
			{rec("t", 1, true, false, 10, 0, 110, "b"), "t running: "},
			{rec("t", 1, false, false, 10, 0, 120, "end"), "t: "},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			j := NewJoiner(tc.cfg)
			for i, st := range tc.steps {
				o, ok := j.Add(st.r)
				got := ""
				if ok {
					got = o.Span
					if o.StillRunning {
						got += " running"
					}
					got += ": " + summary(o)
				}
				if got != st.report {
					t.Errorf("step %d: reported %q, want %q", i, got, st.report)
				}
			}
		})
	}
}

func TestJoinerRetain(t *testing.T) {
	now := time.Unix(1000, 0)
	j := NewJoiner(JoinConfig{Retain: time.Minute, Now: func() time.Time { return now }})
	j.Add(rec("stuck", 1, true, false, 5, 0, 100, "a"))
	j.Add(rec("stuck", 1, true, false, 5, 0, 110, "a"))
	if j.Pending() != 1 {
		t.Fatalf("pending %d, want 1", j.Pending())
	}
	now = now.Add(2 * time.Minute)
	o, ok := j.Add(rec("stuck", 1, false, false, 5, 0, 130e3, "end"))
	if !ok || len(o.Samples) != 0 || j.Pending() != 0 || j.Dropped() != 2 {
		t.Errorf("after Retain: reported %v with %d samples, pending %d, dropped %d; want no samples, 0, 2", ok, len(o.Samples), j.Pending(), j.Dropped())
	}
}

// TestJoinerEarly: samples of a span sampled from its start (taken within
// its 100ms budget) are not reported; they join the span's end when it
// ends over its budget, the first sample past the budget is reported as
// still running, and those of a span that shows nothing past its budget
// by EarlyGrace after it are dropped and counted.
func TestJoinerEarly(t *testing.T) {
	const budget = 100 * uint64(time.Millisecond)
	now := time.Unix(1000, 0)
	j := NewJoiner(JoinConfig{Now: func() time.Time { return now }, EarlyGrace: 50 * time.Millisecond})
	early := func(name string, start, ms uint64, fn string) Record {
		r := rec(name, 7, true, false, start, 1000*start, ms, fn)
		r.Overrun.BudgetNs = budget
		return r
	}
	end := func(name string, start, ms uint64) Record {
		r := rec(name, 7, false, false, start, 1000*start, ms, "main.end")
		r.Overrun.BudgetNs = budget
		return r
	}
	add := func(r Record) string {
		t.Helper()
		o, ok := j.Add(r)
		if !ok {
			return ""
		}
		if o.StillRunning {
			return o.Span + " running: " + summary(o)
		}
		return o.Span + ": " + summary(o)
	}
	for i, st := range []struct {
		r    Record
		want string
	}{
		// Span "slow" (start 1) ends at 105ms: its samples within the
		// budget wait, then join its end.
		{early("slow", 1, 10, "main.a"), ""},
		{early("slow", 1, 50, "main.a"), ""},
		{early("slow", 1, 90, "main.bb"), ""},
		{end("slow", 1, 105), "slow: main.a:on:2x80ms main.bb:on:1x15ms"},
		// Span "run" (start 2) runs on: its first sample past the budget
		// is reported as still running, as without sampling from the start.
		{early("run", 2, 40, "main.a"), ""},
		{early("run", 2, 110, "main.bb"), "run running: "},
		{early("run", 2, 120, "main.bb"), ""},
		{end("run", 2, 150), "run: main.a:on:1x70ms main.bb:on:2x40ms"},
		// Span "fast" (start 3) ends within its budget: no end comes.
		{early("fast", 3, 10, "main.a"), ""},
		{early("fast", 3, 20, "main.a"), ""},
	} {
		if got := add(st.r); got != st.want {
			t.Errorf("step %d: %q, want %q", i, got, st.want)
		}
	}
	if j.Pending() != 1 || j.EarlyDropped() != 0 {
		t.Fatalf("before its budget: %d pending, %d dropped; want 1, 0", j.Pending(), j.EarlyDropped())
	}
	// 80ms to its budget and 50ms of grace: still waiting at 129ms.
	now = now.Add(129 * time.Millisecond)
	if j.EarlyDropped() != 0 || j.Pending() != 1 {
		t.Fatalf("within the grace: %d dropped, %d pending", j.EarlyDropped(), j.Pending())
	}
	now = now.Add(2 * time.Millisecond)
	if got := j.EarlyDropped(); got != 2 || j.Pending() != 0 {
		t.Errorf("past the grace: %d dropped, %d pending; want 2, 0", got, j.Pending())
	}
	if j.Dropped() != 0 {
		t.Errorf("Dropped %d: early drops are counted apart", j.Dropped())
	}
}
