//go:build linux

package agent

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/spanwatch/spanwatch/alert"
	"github.com/spanwatch/spanwatch/collector"
	"github.com/spanwatch/spanwatch/config"
	"github.com/spanwatch/spanwatch/detector"
	"github.com/spanwatch/spanwatch/internal/buildinfo"
	"github.com/spanwatch/spanwatch/internal/crashpoint"
	"github.com/spanwatch/spanwatch/internal/memory"
	"github.com/spanwatch/spanwatch/metrics"
	"github.com/spanwatch/spanwatch/notify"
	"github.com/spanwatch/spanwatch/otlp"
	"github.com/spanwatch/spanwatch/snapshot"
)

// DefaultShutdownTimeout bounds the graceful shutdown: the final
// snapshot, evaluation and outbox writes.
const DefaultShutdownTimeout = 10 * time.Second

// Options are the parts of an agent that do not come from the
// configuration file.
type Options struct {
	Logger *slog.Logger
	// Output receives each snapshot as one JSON line (snapshot/schema.json),
	// when set, or as parts of at most OutputMaxLine bytes each when it is
	// longer (snapshot.LineWriter). It is synced at shutdown when it is a
	// file.
	Output io.Writer
	// OutputMaxLine bounds the lines of Output (snapshot.DefaultMaxLine
	// when 0).
	OutputMaxLine int
	// ListenAddr serves /metrics, /snapshot, /api/alerts, /api/status and
	// /api/dead-letters, when set. New fails when it cannot bind it.
	ListenAddr string
	// Notifier, when set, receives the alerts instead of the
	// configuration's webhooks (the demo prints them); no outbox is
	// opened.
	Notifier alert.Notifier
	// OnSnapshot and OnAlerts are called from the loop after each
	// evaluation, with the snapshot and the alerts whose state changed.
	OnSnapshot func(*snapshot.Snapshot)
	OnAlerts   func([]*alert.Alert)
	// OnReady is called once the collector is attached.
	OnReady func(*collector.Collector)
	// ReloadInterval is how often the configuration file and the files it
	// names are polled for changes (default config.DefaultReloadInterval;
	// negative: only on SIGHUP). It is independent of the snapshot
	// interval.
	ReloadInterval time.Duration
	// ShutdownTimeout bounds the work done after ctx ends (default
	// DefaultShutdownTimeout).
	ShutdownTimeout time.Duration
	// MaxHeldAlerts bounds the alerts held in memory while the outbox
	// cannot be written (notify.Options.MaxHeld; 0: notify.DefaultMaxHeld).
	MaxHeldAlerts int
}

// An Agent collects spans, evaluates the rules every interval and delivers
// alerts, until its context ends; then it shuts down gracefully. Make one
// with New, then call Run once.
type Agent struct {
	opts Options
	log  *slog.Logger

	det        *detector.Detector
	coord      *config.Coordinator // what runs, and its reloads
	dispatcher *notify.Dispatcher  // nil without webhooks or with Options.Notifier
	notifier   alert.Notifier      // where alerts go, nil for nowhere
	exporter   *metrics.Exporter   // nil without a listener
	otlp       *otlp.Exporter      // nil without an otlp: section
	listener   *listener           // nil without a listener

	plan  memory.Plan // how the memory budget is divided (cfg.Memory at start)
	meter *memory.Meter
	maps  memory.ProcessMapBytes
	gov   *memory.Governor

	mu       sync.Mutex
	col      *collector.Collector
	interval chan time.Duration // a reload changed the interval
	// externalURLs is the running external_url, where alerts'
	// generatorURL points.
	externalURLs atomic.Pointer[string]

	last lastSnapshot
	// phase is what /-/ready answers: starting, ready, stopping.
	phase atomic.Int32

	running   atomic.Bool
	closeOnce sync.Once
}

// New prepares an agent for cfg without loading anything into the kernel:
// it opens the outbox (when the configuration has webhooks) and binds the
// listener, so that a busy port or a locked outbox stops the agent before
// it starts. When cfg came from a file (config.Load), New reads that file
// again through its coordinator, which watches exactly what it read from
// then on.
func New(cfg *config.Config, opts Options) (_ *Agent, err error) {
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.ShutdownTimeout <= 0 {
		opts.ShutdownTimeout = DefaultShutdownTimeout
	}
	a := &Agent{opts: opts, log: opts.Logger, interval: make(chan time.Duration, 1)}
	defer func() {
		if err != nil {
			a.Close()
		}
	}()
	// The meter reads the binary's resident size now, before the BPF
	// maps are mapped into the process.
	a.plan = cfg.Memory
	a.meter = memory.NewMeter(a.plan.Budget.Cgroup, a.maps.Read)
	a.gov = memory.NewGovernor(memory.GovernorConfig{Logger: a.log, Budget: a.plan.Budget.Bytes, Apply: a.shed})
	if opts.ListenAddr != "" {
		mcfg := cfg.Metrics
		mcfg.Logger = a.log
		if a.exporter, err = metrics.NewExporter(mcfg); err != nil {
			return nil, err
		}
	}
	if cfg.OTLP != nil {
		res := map[string]string{"service.name": "spanwatch", "service.version": buildinfo.Release, "host.name": detector.NodeName()}
		if a.otlp, err = otlp.New(*cfg.OTLP, res, a.log); err != nil {
			return nil, err
		}
	}
	dcfg := detector.Config{Logger: a.log, Notifier: urlNotifier{a}}
	if a.exporter != nil {
		dcfg.OnRuleError = func(rule string, _ error) { a.exporter.RuleError(rule) }
	}
	a.det = detector.New(dcfg)
	a.coord = config.NewCoordinator(cfg, config.CoordinatorConfig{Logger: a.log, Interval: opts.ReloadInterval})
	if cfg, err = a.coord.Load(); err != nil {
		return nil, err
	}
	a.det.SetRules(cfg.Rules)
	a.externalURLs.Store(&cfg.ExternalURL)

	a.notifier = opts.Notifier
	if a.notifier == nil && cfg.Notify != nil {
		if a.dispatcher, err = notify.New(cfg.Notify, notify.Options{Logger: a.log, MaxHeld: opts.MaxHeldAlerts}); err != nil {
			return nil, fmt.Errorf("start notifier: %w", err)
		}
		a.notifier = a.dispatcher
		// The alert state lives in the outbox beside the alerts in
		// delivery: a restart resumes both.
		a.det.SetStore(a.dispatcher)
		rs, err := a.det.Restore(time.Now())
		switch {
		case err != nil:
			a.log.Error("alert_state_not_restored", "error", err, "effect", "alerts that were firing fire again as new episodes")
		case rs.Skipped != "":
			a.log.Info("alert_state_not_restored", "reason", rs.Skipped)
		default:
			a.log.Info("alert_state_restored", "firing", rs.Firing, "pending", rs.Pending, "series", rs.Series,
				"windows", rs.Windows, "baselines", rs.Baselines, "saved_ago", time.Since(rs.Saved).Round(time.Millisecond))
		}
	}
	if opts.ListenAddr != "" {
		if a.listener, err = listen(a, opts.ListenAddr, cfg.Listener); err != nil {
			return nil, err
		}
		a.registerMetrics()
	}
	a.subscribe()
	return a, nil
}

// Run loads the BPF programs, attaches the span sources and, every
// interval, takes a snapshot, evaluates it and delivers the alerts, until
// ctx ends. Then it shuts down gracefully: a final snapshot of what the
// kernel counted since the last one, a final evaluation, its alerts
// written to the outbox, the output synced; and returns nil. It reloads
// the configuration when its files change and on SIGHUP. Run is called
// once.
func (a *Agent) Run(ctx context.Context) error {
	if !a.running.CompareAndSwap(false, true) {
		return errors.New("agent: Run called twice")
	}
	defer a.Close()
	// Work that must finish during the shutdown (the overrun callback's
	// outbox writes, the final evaluation) runs on a context that ctx's
	// end does not cancel.
	work, stopWork := context.WithCancel(context.WithoutCancel(ctx))
	defer stopWork()

	cfg := a.coord.Config()
	// The listener answers from the start: /-/healthy says the process
	// serves, /-/ready says 503 until the BPF objects are loaded and the
	// first snapshot is taken.
	if a.listener != nil {
		a.listener.serve()
	}
	a.applyPlan()
	ccfg := collectorConfig(cfg.Collector, a.plan, a.log)
	if a.otlp != nil {
		// Sends the overruns as OTLP log records; what is queued when
		// the run ends goes out after the collector has stopped.
		octx, stopOTLP := context.WithCancel(context.WithoutCancel(ctx))
		done := make(chan struct{})
		go func() { a.otlp.Run(octx); close(done) }()
		defer func() { stopOTLP(); <-done }()
	}
	ccfg.OnOverrun = func(ov snapshot.Overrun) {
		if a.otlp != nil {
			a.otlp.Overrun(&ov)
		}
		al, err := a.det.Overrun(work, ov)
		if err != nil {
			a.log.Warn("overrun_alert_failed", "span", ov.Span, "error", err)
		}
		if al != nil && a.opts.OnAlerts != nil {
			a.setURL(al)
			a.opts.OnAlerts([]*alert.Alert{al})
		}
	}
	col, err := collector.New(ctx, ccfg)
	if err != nil {
		return err
	}
	defer col.Close()
	if err := applyBudgets(col, cfg); err != nil {
		return err
	}
	srcs, err := attachSources(ctx, col, cfg)
	if err != nil {
		return err
	}
	defer func() {
		for i := len(srcs) - 1; i >= 0; i-- {
			srcs[i].Close()
		}
	}()
	a.mu.Lock()
	a.col = col
	a.mu.Unlock()
	if ok, how := col.UserEventsAttached(); ok {
		a.log.Info("user_events_attached", "method", how)
	}
	if a.opts.OnReady != nil {
		a.opts.OnReady(col)
	}
	a.phase.Store(int32(phaseFirstSnapshot))

	stopReload := a.watchConfig(ctx)
	defer stopReload()
	govCtx, stopGov := context.WithCancel(ctx)
	defer stopGov()
	go a.gov.Run(govCtx, time.Second, a.meter.Read)

	out := newOutput(a.opts.Output, a.opts.OutputMaxLine)
	interval := cfg.Collector.Interval
	tick := time.NewTicker(interval)
	defer tick.Stop()
	a.log.Info("started", "interval", cfg.Collector.Interval, "rules", len(cfg.Rules.Rules), "policies", len(cfg.Rules.Policies), "budgets", len(cfg.Rules.Budgets))
	for {
		select {
		case <-ctx.Done():
			stopReload() // nothing changes under the final cycle
			return a.shutdown(work, col, out)
		case d := <-a.interval:
			if d != interval {
				tick.Reset(d)
				a.log.Info("interval_changed", "from", interval, "to", d)
				interval = d
			}
		case <-tick.C:
			if _, err := a.cycle(work, col, out); err != nil {
				return err
			}
		}
	}
}

// applyPlan sets what the memory plan sizes before the collector loads:
// Go's soft limit and the range history's bound, and logs the plan.
func (a *Agent) applyPlan() {
	p := a.plan
	if p.GoLimit == 0 {
		return // a configuration not made by Parse: no plan
	}
	debug.SetMemoryLimit(int64(p.GoLimit))
	a.det.SetHistoryBytes(int64(p.HistoryBytes))
	a.log.Info("memory_budget", "budget", memory.FormatBytes(p.Budget.Bytes), "from", p.Budget.Detail,
		"max_series", p.MaxSeries, "histogram_cells", p.HistogramCells, "bpf_maps", memory.FormatBytes(p.KernelBytes),
		"go_limit", memory.FormatBytes(p.GoLimit), "range_history", memory.FormatBytes(p.HistoryBytes))
}

// shed applies a level of the memory budget's shedding (internal/memory
// gives the order): each part sheds its detail at its level and takes it
// back below.
func (a *Agent) shed(l memory.Level) {
	a.mu.Lock()
	col := a.col
	a.mu.Unlock()
	if col != nil {
		col.SetStackDetail(l < memory.StackDetail)
	}
	a.det.SetHistoryTrim(l >= memory.UnusedHistory)
	if a.exporter != nil {
		a.exporter.SetDropAbsent(l >= memory.StaleExports)
	}
	hist := a.plan.HistoryBytes
	if l >= memory.HistoryDepth {
		hist /= 4
	}
	a.det.SetHistoryBytes(int64(hist))
}

// watchConfig reloads the configuration when its files change and on
// SIGHUP, until ctx ends or the returned function is called, which waits
// for a reload under way. Without a file, SIGHUP is logged and ignored.
func (a *Agent) watchConfig(ctx context.Context) (stop func()) {
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	wg.Add(1)
	go func() {
		defer wg.Done()
		defer signal.Stop(hup)
		for {
			select {
			case <-ctx.Done():
				return
			case <-hup:
				if !a.coord.Reloadable() {
					a.log.Warn("reload_unavailable", "trigger", "sighup", "reason", "the configuration is built in, not from a file")
					continue
				}
				a.coord.Reload() // logged and counted there
			}
		}
	}()
	if a.coord.Reloadable() {
		wg.Add(1)
		go func() { defer wg.Done(); a.coord.Run(ctx) }()
	}
	var once sync.Once
	return func() { once.Do(func() { cancel(); wg.Wait() }) }
}

// cycle takes a snapshot, evaluates it, and hands it out; it returns the
// snapshot (nil when the collector could not take one). The error is the
// output's: the loop stops on it.
func (a *Agent) cycle(ctx context.Context, col *collector.Collector, out *output) (*snapshot.Snapshot, error) {
	snap, err := col.Snapshot()
	if err != nil {
		a.log.Error("snapshot_failed", "error", err)
		return nil, nil
	}
	crashpoint.Hit("snapshot")
	start := time.Now()
	changed, err := a.det.Evaluate(ctx, snap)
	if err != nil {
		a.log.Warn("evaluation_failed", "error", err)
	}
	if a.exporter != nil {
		a.exporter.Observe(snap)
		a.exporter.ObserveEvaluation(time.Since(start))
	}
	a.last.set(snap)
	a.phase.CompareAndSwap(int32(phaseFirstSnapshot), int32(phaseReady))
	if err := out.write(snap); err != nil {
		return snap, err
	}
	if a.opts.OnSnapshot != nil {
		a.opts.OnSnapshot(snap)
	}
	if len(changed) > 0 && a.opts.OnAlerts != nil {
		for _, al := range changed {
			a.setURL(al)
		}
		a.opts.OnAlerts(changed)
	}
	return snap, nil
}

// shutdown takes the final snapshot (the spans counted since the last
// one, which a stop would otherwise lose), evaluates it so that its alerts
// reach the outbox, and syncs the output.
func (a *Agent) shutdown(work context.Context, col *collector.Collector, out *output) error {
	start := time.Now()
	a.phase.Store(int32(phaseStopping))
	a.log.Info("shutting_down", "reason", "context ended (SIGTERM, SIGINT or the end of the run)")
	ctx, cancel := context.WithTimeout(work, a.opts.ShutdownTimeout)
	defer cancel()
	snap, err := a.cycle(ctx, col, out)
	if err != nil {
		return err
	}
	if err := out.sync(); err != nil {
		return fmt.Errorf("sync output: %w", err)
	}
	var spans uint64
	var series int
	if snap != nil {
		series = len(snap.Series)
		for i := range snap.Series {
			spans += snap.Series[i].Count
		}
	}
	st := a.det.Stats()
	a.log.Info("stopped", "final_spans", spans, "final_series", series, "alerts_firing", st.Firing, "alerts_pending", st.Pending, "took", time.Since(start).Round(time.Microsecond))
	return nil
}

// Close releases what New opened: the listener and the outbox. Run
// closes the agent when it returns; call Close for an agent that is not
// run. It is idempotent.
func (a *Agent) Close() error {
	var err error
	a.closeOnce.Do(func() {
		if a.listener != nil {
			a.listener.close()
		}
		if a.dispatcher != nil {
			err = a.dispatcher.Close()
		}
	})
	return err
}

// Config returns the configuration that runs now.
func (a *Agent) Config() *config.Config { return a.coord.Config() }

// PendingRestart returns what the configuration file changes that only a
// restart applies; empty when what runs is what the file says.
func (a *Agent) PendingRestart() []config.RestartChange { return a.coord.Pending() }

// ReloadStats returns the reloads' counters (zero for a configuration
// that did not come from a file).
func (a *Agent) ReloadStats() config.ReloadStats { return a.coord.Stats() }

// Addr is the listener's address, nil without one.
func (a *Agent) Addr() net.Addr {
	if a.listener == nil {
		return nil
	}
	return a.listener.ln.Addr()
}

// output writes snapshots as JSON lines, each snapshot split into parts
// of bounded lines when it is longer: what it holds is one line, whatever
// the number of series.
type output struct {
	w  io.Writer
	lw *snapshot.LineWriter
}

func newOutput(w io.Writer, maxLine int) *output {
	if w == nil {
		return &output{}
	}
	return &output{w: w, lw: snapshot.NewLineWriter(w, maxLine)}
}

func (o *output) write(s *snapshot.Snapshot) error {
	if o.lw == nil {
		return nil
	}
	_, err := o.lw.Write(s)
	return err
}

// sync flushes a file's writes to its disk (an *os.File, or a rotated
// file); pipes and terminals have nothing to sync.
func (o *output) sync() error {
	f, ok := o.w.(interface{ Sync() error })
	if !ok {
		return nil
	}
	if err := f.Sync(); err != nil && !errors.Is(err, syscall.EINVAL) && !errors.Is(err, syscall.ENOTSUP) {
		return err
	}
	return nil
}

// urlNotifier sets each alert's generatorURL and hands it to the agent's
// notifier.
type urlNotifier struct{ a *Agent }

func (n urlNotifier) Notify(ctx context.Context, alerts ...*alert.Alert) (bool, error) {
	if n.a.notifier == nil {
		return false, nil
	}
	for _, al := range alerts {
		n.a.setURL(al)
	}
	return n.a.notifier.Notify(ctx, alerts...)
}

// lastSnapshot keeps the newest snapshot for the listener.
type lastSnapshot struct {
	mu sync.Mutex
	s  *snapshot.Snapshot
}

func (l *lastSnapshot) set(s *snapshot.Snapshot) {
	l.mu.Lock()
	l.s = s
	l.mu.Unlock()
}

func (l *lastSnapshot) get() *snapshot.Snapshot {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.s
}
