package detector

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/spanwatch/spanwatch/alert"
	"github.com/spanwatch/spanwatch/snapshot"
)

func overrun(at time.Duration, span, comm string) snapshot.Overrun {
	return snapshot.Overrun{
		Time: t0.Add(at), Span: span, PID: 1234, TID: 1240, Comm: comm, CgroupID: 42,
		Identity: snapshot.Identity{Container: "web-1"}, DurationNs: 312e6, BudgetNs: 250e6,
		TraceID: "4bf92f3577b34da6a3ce929d0e0e4736", SpanID: "00f067aa0ba902b7",
		UserStack: []snapshot.Frame{
			{Function: "main.slowQuery", File: "/src/db.go", Line: 88},
			{Function: "main.checkout", File: "/src/api.go", Line: 31},
			{Module: "/usr/lib/libc.so.6", Offset: 0x29d90},
		},
	}
}

func TestOverrunAlert(t *testing.T) {
	rec := &recorder{}
	d := New(Config{Notifier: rec})
	d.SetRules(mustParse(t, "budgets:\n  - {span: checkout, budget: 250ms, labels: {severity: page}, annotations: {runbook: \"https://rb/{{ .Labels.span }}?took={{ .Value }}\"}}\n"))
	a, err := d.Overrun(context.Background(), overrun(0, "checkout", "api"))
	if err != nil || a == nil {
		t.Fatalf("Overrun = %v, %v", a, err)
	}
	wantLabels := map[string]string{"alertname": "SpanOverBudget", "span": "checkout", "process": "api", "container": "web-1", "severity": "page", "node": NodeName()}
	if fmt.Sprint(a.Labels) != fmt.Sprint(wantLabels) {
		t.Errorf("labels = %v, want %v", a.Labels, wantLabels)
	}
	wantAnn := map[string]string{
		"summary":  "span checkout took 312ms, over its 250ms budget",
		"duration": "312ms",
		"budget":   "250ms",
		"pid":      "1234",
		"tid":      "1240",
		"trace_id": "4bf92f3577b34da6a3ce929d0e0e4736",
		"span_id":  "00f067aa0ba902b7",
		"stack":    "main.slowQuery (/src/db.go:88)\nmain.checkout (/src/api.go:31)\n/usr/lib/libc.so.6+0x29d90",
		"runbook":  "https://rb/checkout?took=312ms",
	}
	if fmt.Sprint(a.Annotations) != fmt.Sprint(wantAnn) {
		t.Errorf("annotations = %v\nwant %v", a.Annotations, wantAnn)
	}
	if a.State != alert.StateFiring || !a.StartsAt.Equal(t0) || !a.EndsAt.Equal(t0.Add(4*time.Minute)) || a.Series == nil || *a.Series != (alert.SeriesRef{Span: "checkout", CgroupID: overrun(0, "checkout", "api").CgroupID}) {
		t.Errorf("alert = %+v", a)
	}
	if sent := rec.take(); len(sent) != 1 || sent[0].Fingerprint != a.Fingerprint {
		t.Errorf("sent %v", sent)
	}
}

func TestOverrunDedupe(t *testing.T) {
	rec := &recorder{}
	d := New(Config{Notifier: rec, OverrunInterval: 30 * time.Second})
	ctx := context.Background()
	// 1000 overruns of one span and process in 20s: one alert.
	for i := 0; i < 1000; i++ {
		d.Overrun(ctx, overrun(time.Duration(i)*20*time.Millisecond, "checkout", "api"))
	}
	// Another process is another alert.
	d.Overrun(ctx, overrun(time.Second, "checkout", "worker"))
	if sent := rec.take(); len(sent) != 2 {
		t.Fatalf("sent %d alerts, want 2", len(sent))
	}
	// After the interval the next one goes out and reports the suppressed.
	a, _ := d.Overrun(ctx, overrun(40*time.Second, "checkout", "api"))
	if a == nil || a.Annotations["suppressed"] != "999" {
		t.Fatalf("alert after interval = %+v", a)
	}
	st := d.Stats()
	if st.OverrunAlerts != 3 || st.OverrunsDeduped != 999 {
		t.Errorf("stats = %+v", st)
	}
}

func TestOverrunBurst(t *testing.T) {
	rec := &recorder{}
	d := New(Config{Notifier: rec, OverrunInterval: time.Minute, OverrunBurst: 5})
	ctx := context.Background()
	for i := 0; i < 20; i++ {
		d.Overrun(ctx, overrun(time.Duration(i)*time.Second, fmt.Sprintf("span%d", i), "api"))
	}
	if n := len(rec.take()); n != 5 {
		t.Errorf("sent %d in one interval, want the burst of 5", n)
	}
	// The next interval has a new allowance.
	d.Overrun(ctx, overrun(2*time.Minute, "later", "api"))
	if n := len(rec.take()); n != 1 {
		t.Errorf("sent %d in the next interval, want 1", n)
	}
	if st := d.Stats(); st.OverrunsLimited != 15 {
		t.Errorf("limited = %d, want 15", st.OverrunsLimited)
	}
}

func TestOverrunBudgetOptions(t *testing.T) {
	rec := &recorder{}
	d := New(Config{Notifier: rec})
	d.SetRules(mustParse(t, `
budgets:
  - {span: healthz, budget: 1s, alert: false}
  - {span: "db.*", budget: 50ms, labels: {alertname: SlowQuery}}
`))
	ctx := context.Background()
	if a, _ := d.Overrun(ctx, overrun(0, "healthz", "api")); a != nil {
		t.Errorf("alert: false still alerted: %v", a.Labels)
	}
	o := overrun(0, "db.query", "api")
	o.UserStack = nil
	o.StackError = "stack not captured: capture_stack is false"
	o.StillRunning = true
	a, _ := d.Overrun(ctx, o)
	if a == nil || a.Name() != "SlowQuery" {
		t.Fatalf("alert = %+v", a)
	}
	if !strings.HasPrefix(a.Annotations["summary"], "span db.query has been running for 312ms") || a.Annotations["stack"] != "(no stack: stack not captured: capture_stack is false)" {
		t.Errorf("annotations = %v", a.Annotations)
	}
	if st := d.Stats(); st.OverrunsIgnored != 1 || st.OverrunAlerts != 1 {
		t.Errorf("stats = %+v", st)
	}
}

func TestOverrunStackTruncated(t *testing.T) {
	d := New(Config{})
	o := overrun(0, "checkout", "api")
	o.UserStack = nil
	for i := 0; i < 20; i++ {
		o.UserStack = append(o.UserStack, snapshot.Frame{Function: fmt.Sprintf("f%d", i)})
	}
	a, _ := d.Overrun(context.Background(), o)
	lines := strings.Split(a.Annotations["stack"], "\n")
	if len(lines) != stackFrames+1 || lines[0] != "f0" || lines[stackFrames] != "... 12 more frames" {
		t.Errorf("stack = %q", a.Annotations["stack"])
	}
}

// TestConcurrent runs overruns, evaluations, reloads and readers at once;
// run with -race.
func TestConcurrent(t *testing.T) {
	rec := &recorder{}
	d := New(Config{Notifier: rec, OverrunInterval: time.Millisecond})
	cfg := mustParse(t, "budgets:\n  - {span: checkout, budget: 1ms}\nrules:\n  - {name: Slow, when: p99 > 1ms}\n  - {name: Anom, anomaly: {metric: p99, warmup: 2}}\n")
	d.SetRules(cfg)
	var wg sync.WaitGroup
	ctx := context.Background()
	wg.Add(4)
	go func() {
		defer wg.Done()
		for i := 0; i < 200; i++ {
			d.Evaluate(ctx, snap(i, checkout(time.Duration(i%3)*time.Millisecond)))
		}
	}()
	go func() {
		defer wg.Done()
		for i := 0; i < 2000; i++ {
			d.Overrun(ctx, overrun(time.Duration(i)*time.Millisecond, "checkout", "api"))
		}
	}()
	go func() {
		defer wg.Done()
		for i := 0; i < 200; i++ {
			d.SetRules(cfg)
			d.Alerts()
		}
	}()
	go func() {
		defer wg.Done()
		for i := 0; i < 200; i++ {
			d.Stats()
		}
	}()
	wg.Wait()
	if st := d.Stats(); st.Evaluations != 200 || st.OverrunAlerts == 0 {
		t.Errorf("stats = %+v", st)
	}
}

// TestOverrunEpisode drives one span that keeps overrunning for three
// simulated minutes, then pauses, on an injected clock: every alert of the
// episode carries the first overrun's time as StartsAt (Alertmanager shows
// one alert firing since then), EndsAt moves on with each resend, and an
// overrun after the last alert has ended starts a new episode.
func TestOverrunEpisode(t *testing.T) {
	type sent struct {
		at, startsAt, endsAt time.Duration // from t0
		suppressed           string
	}
	for _, tc := range []struct {
		name string
		// every is the spacing of overruns from 0 to until (inclusive);
		// then one overrun comes at after.
		every, until, after time.Duration
		timeout             time.Duration // OverrunResolveTimeout (0: default 4m)
		want                []sent
	}{
		{"every 5s for three minutes, then one 2m later", 5 * time.Second, 3 * time.Minute, 5 * time.Minute, 0, []sent{
			{0, 0, 4 * time.Minute, ""},
			{time.Minute, 0, 5 * time.Minute, "11"},
			{2 * time.Minute, 0, 6 * time.Minute, "11"},
			{3 * time.Minute, 0, 7 * time.Minute, "11"},
			{5 * time.Minute, 0, 9 * time.Minute, ""}, // before 7m: the same episode
		}},
		{"every 20s for three minutes, then one after the alert ended", 20 * time.Second, 3 * time.Minute, 8 * time.Minute, 0, []sent{
			{0, 0, 4 * time.Minute, ""},
			{time.Minute, 0, 5 * time.Minute, "2"},
			{2 * time.Minute, 0, 6 * time.Minute, "2"},
			{3 * time.Minute, 0, 7 * time.Minute, "2"},
			{8 * time.Minute, 8 * time.Minute, 12 * time.Minute, ""}, // 7m passed: a new episode
		}},
		{"resolve timeout shorter than the gap between overruns", 90 * time.Second, 3 * time.Minute, 4 * time.Minute, 80 * time.Second, []sent{
			{0, 0, 80 * time.Second, ""},
			{90 * time.Second, 90 * time.Second, 170 * time.Second, ""},
			{180 * time.Second, 180 * time.Second, 260 * time.Second, ""}, // 170s passed
			{4 * time.Minute, 180 * time.Second, 320 * time.Second, ""},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec := &recorder{}
			var clock time.Time
			d := New(Config{Notifier: rec, OverrunResolveTimeout: tc.timeout, Now: func() time.Time { return clock }})
			d.SetRules(mustParse(t, "budgets:\n  - {span: checkout, budget: 250ms}\n"))
			var times []time.Duration
			for at := time.Duration(0); at <= tc.until; at += tc.every {
				times = append(times, at)
			}
			times = append(times, tc.after)
			var got []sent
			for _, at := range times {
				// The injected clock stamps overruns that come without a
				// time of their own.
				o := overrun(0, "checkout", "api")
				o.Time, clock = time.Time{}, t0.Add(at)
				a, err := d.Overrun(context.Background(), o)
				if err != nil {
					t.Fatal(err)
				}
				if a != nil {
					got = append(got, sent{at, a.StartsAt.Sub(t0), a.EndsAt.Sub(t0), a.Annotations["suppressed"]})
					if a.Fingerprint != alert.Fingerprint(a.Labels) {
						t.Errorf("fingerprint %s does not match %v", a.Fingerprint, a.Labels)
					}
				}
			}
			if fmt.Sprint(got) != fmt.Sprint(tc.want) {
				t.Errorf("sent (at, startsAt, endsAt, suppressed):\n got %v\nwant %v", got, tc.want)
			}
			if n := len(rec.take()); n != len(tc.want) {
				t.Errorf("notifier got %d alerts, want %d", n, len(tc.want))
			}
		})
	}
}

// TestOverrunStackAnnotation checks that the "stack" annotation leads with
// where the span's time went (the hottest application frames of its
// in-span samples) and shows the end stack without the span SDKs' frames.
func TestOverrunStackAnnotation(t *testing.T) {
	f := func(fn, file string, line int) snapshot.Frame {
		return snapshot.Frame{Function: fn, File: file, Line: line}
	}
	sdk := []snapshot.Frame{
		f("github.com/spanwatch/spanwatch/emit.marker", "marker_amd64.s", 7),
		f("github.com/spanwatch/spanwatch/emit.Record", "emit.go", 60),
		f("github.com/spanwatch/spanwatch/emit/otel.(*SpanProcessor).OnEnd", "processor.go", 70),
		f("go.opentelemetry.io/otel/sdk/trace.(*recordingSpan).End", "span.go", 400),
	}
	end := []snapshot.Frame{f("main.loadOrder", "/src/main.go", 120), f("main.handler", "/src/main.go", 90)}
	spin := []snapshot.Frame{f("time.Now", "/go/src/time/time.go", 1), f("main.hash", "/src/main.go", 50), f("main.loadOrder", "/src/main.go", 118)}
	sleep := []snapshot.Frame{f("runtime.gopark", "/go/src/runtime/proc.go", 1), f("time.Sleep", "/go/src/runtime/time.go", 1), f("main.loadOrder", "/src/main.go", 119)}
	for _, tc := range []struct {
		name    string
		stack   []snapshot.Frame
		samples []snapshot.Sample
		running bool
		want    string
	}{
		{"end stack trimmed", append(append([]snapshot.Frame(nil), sdk...), end...), nil, false,
			"main.loadOrder (/src/main.go:120)\nmain.handler (/src/main.go:90)"},
		{"hottest first", append(append([]snapshot.Frame(nil), sdk...), end...), []snapshot.Sample{
			{Count: 20, WeightNs: 200e6, UserStack: spin},
			{Count: 2, WeightNs: 100e6, OffCPU: true, UserStack: sleep},
		}, false, "where the time went (22 samples, 300ms of 312ms):\n" +
			" 64% main.hash (/src/main.go:50) on-CPU, in time.Now\n" +
			" 32% main.loadOrder (/src/main.go:119) off-CPU, in runtime.gopark\n" +
			"ended at:\nmain.loadOrder (/src/main.go:120)\nmain.handler (/src/main.go:90)"},
		{"still running", end, []snapshot.Sample{{Count: 1, UserStack: sleep}}, true,
			"where the time went (1 sample, 0s of 312ms):\n1× main.loadOrder (/src/main.go:119), in runtime.gopark\n" +
				"running at:\nmain.loadOrder (/src/main.go:120)\nmain.handler (/src/main.go:90)"},
		{"samples without an end stack", nil, []snapshot.Sample{{Count: 5, WeightNs: 50e6, UserStack: spin}}, false,
			"where the time went (5 samples, 50ms of 312ms):\n 16% main.hash (/src/main.go:50) on-CPU, in time.Now"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := New(Config{})
			o := overrun(0, "db.query", "api")
			o.UserStack, o.Samples, o.StillRunning = tc.stack, tc.samples, tc.running
			a, err := d.Overrun(context.Background(), o)
			if err != nil || a == nil {
				t.Fatalf("alert %v, %v", a, err)
			}
			if got := a.Annotations["stack"]; got != tc.want {
				t.Errorf("stack annotation:\n%s\nwant:\n%s", got, tc.want)
			}
			if a.Series == nil || a.Series.Span != "db.query" {
				t.Errorf("the alert's series: %+v", a.Series)
			}
		})
	}
}

// TestOverrunStackError checks that a short stack's hint reaches the
// alert beside the stack: the detector writes every annotation of an
// overrun alert, and notify adds none.
func TestOverrunStackError(t *testing.T) {
	d := New(Config{})
	o := overrun(0, "checkout", "api")
	o.StackError = "user stack stops after 3 frames without reaching a thread entry point"
	a, _ := d.Overrun(context.Background(), o)
	if a == nil || a.Annotations["stack_error"] != o.StackError || !strings.HasPrefix(a.Annotations["stack"], "main.slowQuery (/src/db.go:88)") {
		t.Errorf("annotations = %q", a.Annotations)
	}
}
