//go:build linux

package main

import (
	"context"
	_ "embed"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/spanwatch/spanwatch/alert"
	"github.com/spanwatch/spanwatch/collector"
	"github.com/spanwatch/spanwatch/emit"
	"github.com/spanwatch/spanwatch/policy"
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

Examples:
  sudo spanwatch demo
  sudo spanwatch demo --duration 30s --json
  sudo spanwatch demo --config my-rules.yaml   # the workload against your rules and webhooks`,
		flags: func(fs *flag.FlagSet) func(context.Context, []string) error {
			duration := fs.Duration("duration", 10*time.Second, "run for `DURATION` (0: until interrupted)")
			printConfig := fs.Bool("print-config", false, "print the built-in rule file and exit")
			config := fs.String("config", "", "use this rule `FILE` instead of the built-in one (its webhooks get the alerts)")
			jsonOut := fs.Bool("json", false, "print snapshots as JSON lines instead of tables")
			verbose := fs.Bool("v", false, "log debug messages")
			var opts collectorOptions
			opts.flags(fs)
			return func(ctx context.Context, args []string) error {
				if *printConfig {
					_, err := os.Stdout.Write(demoConfig)
					return err
				}
				opts.set = setFlags(fs)
				return runDemo(ctx, os.Stdout, demoOptions{duration: *duration, json: *jsonOut, verbose: *verbose, opts: opts, config: *config})
			}
		},
	})
}

type demoOptions struct {
	config   string
	duration time.Duration
	json     bool
	verbose  bool
	opts     collectorOptions
}

func runDemo(ctx context.Context, w io.Writer, o demoOptions) error {
	if os.Geteuid() != 0 {
		return errors.New("the demo loads BPF programs: run it as root (or with CAP_BPF and CAP_PERFMON)")
	}
	if emit.Mode() == "off" {
		return errors.New("SPANWATCH_EMIT=off disables the span SDK, and with it the demo's workload")
	}
	var rules *policy.Config
	var err error
	if o.config != "" {
		rules, err = policy.LoadFile(o.config)
	} else {
		rules, err = policy.Parse("demo.yaml (built-in)", demoConfig, policy.Options{Dir: "."})
	}
	if err != nil {
		return err
	}
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	// The workload runs in this process: uprobe our own marker, and leave
	// the rest of the host alone.
	o.opts.Binaries = append(o.opts.Binaries, exe)
	o.opts.ScanInterval = -1

	var mu sync.Mutex // serializes output
	var spans, overruns, withStack atomic.Uint64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	defer wg.Wait()
	defer close(stop)

	printer := &printNotifier{w: w, mu: &mu}
	cfg := agentConfig{
		log:   newLogger(o.verbose),
		rules: rules,
		path:  o.config,
		opts:  o.opts,
		stop:  o.duration,
		ready: func(c *collector.Collector) {
			how := "marker (uprobe on the span SDK's nop)"
			if ok, m := c.UserEventsAttached(); ok && emit.Mode() == "user_events" {
				how = "user_events (" + m + " on perf_tp_event)"
			}
			fmt.Fprintf(w, "spanwatch demo: workload emits through %s; Ctrl-C to stop\n\n", how)
			wg.Add(1)
			go func() { defer wg.Done(); demoWorkload(stop) }()
		},
		onSnapshot: func(s *snapshot.Snapshot) {
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
				s.Encode(w)
				return
			}
			fmt.Fprintf(w, "── %s ──\n", s.Time.Format("15:04:05"))
			renderTable(w, s, 20)
			fmt.Fprintln(w)
		},
	}
	if rules.Webhooks.Kind == 0 {
		cfg.notifier = printer // no webhooks: print the alerts
	} else {
		cfg.onAlerts = func(as []*alert.Alert) { printer.Notify(ctx, as...) } // print what goes to the webhooks
	}
	if err := runAgent(ctx, cfg); err != nil {
		return err
	}
	fmt.Fprintf(w, "demo done: %d spans aggregated in the kernel, %d over budget, %d with a user stack; %d alerts sent\n",
		spans.Load(), overruns.Load(), withStack.Load(), printer.sent.Load())
	if spans.Load() == 0 {
		return errors.New("no spans arrived: run with -v to see why the sources did not attach")
	}
	return nil
}

// printNotifier prints alerts instead of delivering them.
type printNotifier struct {
	w    io.Writer
	mu   *sync.Mutex
	sent atomic.Uint64
}

func (p *printNotifier) Notify(ctx context.Context, alerts ...*alert.Alert) (bool, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, a := range alerts {
		p.sent.Add(1)
		var stack []snapshot.Frame
		if a.Overrun != nil {
			stack = a.Overrun.UserStack
		}
		renderAlert(p.w, a.Name(), string(a.State), a.Labels, a.Annotations, stack)
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
