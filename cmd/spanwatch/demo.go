//go:build linux

package main

import (
	"context"
	_ "embed"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/spanwatch/spanwatch/agent"
	"github.com/spanwatch/spanwatch/alert"
	"github.com/spanwatch/spanwatch/collector"
	"github.com/spanwatch/spanwatch/config"
	"github.com/spanwatch/spanwatch/emit"
	"github.com/spanwatch/spanwatch/internal/duration"
	"github.com/spanwatch/spanwatch/snapshot"
)

//go:embed demo.yaml
var demoConfig []byte

func init() {
	register(&command{
		name:    "demo",
		args:    "[flags]",
		summary: "show the whole path in one command: a built-in workload, budgets, rules and alerts",
		help: `
demo runs the agent with a built-in rule file (spanwatch demo --print-config
shows it) and a built-in workload that emits spans from this process through
the span SDK: demo.checkout (a few ms; 2% take 120ms, over its 100ms
budget), demo.db.query (about 1ms; 4% fail) and demo.cache.get (tens of µs).

Every interval it prints the span table, then the alerts that changed: a
slow checkout raises SpanOverBudget at once, with the stack of the goroutine
that ran it; the rules raise CheckoutSlow and QueryErrors.

It works on kernels with user_events (6.4+, CONFIG_USER_EVENTS) and without
(the SDK then calls a nop marker that spanwatch uprobes). Needs root, or
CAP_BPF + CAP_PERFMON.

With --json, stdout carries only JSON lines: each snapshot (see
snapshot/schema.json) and, for each alert that changes state, {"alert":
ALERT}; everything meant for people goes to stderr.

Examples:
  sudo spanwatch demo
  sudo spanwatch demo --duration 30s --json
  sudo spanwatch demo --config my-rules.yaml   # the workload against your rules and webhooks`,
		flags: func(fs *flag.FlagSet) func(context.Context, []string) error {
			runFor := duration.Flag(fs, "duration", 10*time.Second, "run for `DURATION` (0: until interrupted)")
			printConfig := fs.Bool("print-config", false, "print the built-in rule file and exit")
			configFile := fs.String("config", "", "use this rule `FILE` instead of the built-in one (its webhooks get the alerts)")
			jsonOut := fs.Bool("json", false, "print only JSON lines on stdout: snapshots, and {\"alert\": ...} for each alert")
			logs := newLogFlags(fs)
			cflags := config.NewCollectorFlags(fs)
			return func(ctx context.Context, args []string) error {
				if *printConfig {
					_, err := os.Stdout.Write(demoConfig)
					return err
				}
				return runDemo(ctx, os.Stdout, os.Stderr, demoOptions{duration: *runFor, json: *jsonOut, logs: logs, load: cflags.LoadOptions(), config: *configFile})
			}
		},
	})
}

type demoOptions struct {
	config   string
	duration time.Duration
	json     bool
	logs     *logFlags
	load     config.LoadOptions
}

// runDemo runs the agent over the built-in workload. Tables, alerts and
// the summary go to w; with json, w gets only JSON lines and the human
// text goes to errw.
func runDemo(ctx context.Context, w, errw io.Writer, o demoOptions) error {
	if os.Geteuid() != 0 {
		return errors.New("the demo loads BPF programs: run it as root (or with CAP_BPF and CAP_PERFMON)")
	}
	if emit.Mode() == "off" {
		return errors.New("SPANWATCH_EMIT=off disables the span SDK, and with it the demo's workload")
	}
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	// The workload runs in this process: uprobe our own marker, and leave
	// the rest of the host alone.
	lo := o.load
	lo.Collector.Binaries = append(lo.Collector.Binaries, exe)
	lo.Collector.ScanInterval = -1
	lo.Flags["scan_interval"] = "demo"
	var cfg *config.Config
	if o.config != "" {
		cfg, err = config.Load(o.config, lo)
	} else {
		lo.Dir = "."
		cfg, err = config.Parse("demo.yaml (built-in)", demoConfig, lo)
	}
	if err != nil {
		return configError(err)
	}
	text := w
	if o.json {
		text = errw
	}

	var mu sync.Mutex // serializes output
	var spans, overruns, withStack atomic.Uint64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	defer wg.Wait()
	defer close(stop)

	printer := &printNotifier{w: w, mu: &mu, json: o.json}
	opts := agent.Options{
		Logger: o.logs.logger(),
		OnReady: func(c *collector.Collector) {
			how := "marker (uprobe on the span SDK's nop)"
			if ok, m := c.UserEventsAttached(); ok && emit.Mode() == "user_events" {
				how = "user_events (" + m + " on perf_tp_event)"
			}
			fmt.Fprintf(text, "spanwatch demo: workload emits through %s; Ctrl-C to stop\n\n", how)
			wg.Add(1)
			go func() { defer wg.Done(); demoWorkload(stop) }()
		},
		OnSnapshot: func(s *snapshot.Snapshot) {
			mu.Lock()
			defer mu.Unlock()
			for _, sr := range s.Series {
				spans.Add(sr.Count)
			}
			for _, ov := range s.Overruns {
				overruns.Add(1)
				if len(ov.UserStack) > 0 {
					withStack.Add(1)
				}
			}
			if o.json {
				json.NewEncoder(w).Encode(s) // one line, unlike Snapshot.Encode
				return
			}
			fmt.Fprintf(w, "── %s ──\n", s.Time.Format("15:04:05"))
			renderTable(w, s, 20)
			fmt.Fprintln(w)
		},
	}
	if cfg.Notify == nil {
		opts.Notifier = printer // no webhooks: print the alerts
	} else {
		opts.OnAlerts = func(as []*alert.Alert) { printer.Notify(ctx, as...) } // print what goes to the webhooks
	}
	if o.duration > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, o.duration)
		defer cancel()
	}
	a, err := agent.New(cfg, opts)
	if err != nil {
		return err
	}
	if err := a.Run(ctx); err != nil {
		return err
	}
	fmt.Fprintf(text, "demo done: %d spans aggregated in the kernel, %d over budget, %d with a user stack; %d alerts sent\n",
		spans.Load(), overruns.Load(), withStack.Load(), printer.sent.Load())
	if spans.Load() == 0 {
		return errors.New("no spans arrived: run with -v to see why the sources did not attach")
	}
	return nil
}

// printNotifier prints alerts instead of delivering them: as text, or as
// one JSON object per line, {"alert": ALERT}.
type printNotifier struct {
	w    io.Writer
	mu   *sync.Mutex
	json bool
	sent atomic.Uint64
}

func (p *printNotifier) Notify(ctx context.Context, alerts ...*alert.Alert) (bool, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, a := range alerts {
		p.sent.Add(1)
		if p.json {
			if err := json.NewEncoder(p.w).Encode(struct {
				Alert *alert.Alert `json:"alert"`
			}{a}); err != nil {
				return false, err
			}
			continue
		}
		renderAlert(p.w, a.Name(), string(a.State), a.Labels, a.Annotations)
	}
	return false, nil
}

// demoWorkload emits the demo's spans until stop closes.
func demoWorkload(stop <-chan struct{}) {
	var wg sync.WaitGroup
	run := func(f func(r *rand.Rand)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := rand.New(rand.NewSource(time.Now().UnixNano()))
			for {
				select {
				case <-stop:
					return
				default:
					f(r)
				}
			}
		}()
	}
	run(func(r *rand.Rand) { demoCheckout(r) })
	run(func(r *rand.Rand) { demoQuery(r) })
	run(func(r *rand.Rand) {
		sp := emit.Start("demo.cache.get")
		spin(time.Duration(20+r.Intn(60)) * time.Microsecond)
		sp.End(nil)
		time.Sleep(200 * time.Microsecond)
	})
	wg.Wait()
}

// demoCheckout is a checkout: a few ms, and 2% of the time far longer, so
// the overrun's stack shows this function.
//
//go:noinline
func demoCheckout(r *rand.Rand) {
	sp := emit.Start("demo.checkout")
	d := time.Duration(2+r.Intn(6)) * time.Millisecond
	if r.Intn(50) == 0 {
		d = 120 * time.Millisecond
	}
	time.Sleep(d)
	sp.End(nil)
}

var errDemoQuery = errors.New("demo: query failed")

//go:noinline
func demoQuery(r *rand.Rand) {
	sp := emit.Start("demo.db.query")
	time.Sleep(time.Duration(500+r.Intn(1000)) * time.Microsecond)
	var err error
	if r.Intn(25) == 0 {
		err = errDemoQuery
	}
	sp.End(err)
}

// spin burns CPU for d, so short spans are not all sleep.
func spin(d time.Duration) {
	for end := time.Now().Add(d); time.Now().Before(end); {
	}
}
