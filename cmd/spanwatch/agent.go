//go:build linux

package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"

	"github.com/spanwatch/spanwatch/alert"
	"github.com/spanwatch/spanwatch/collector"
	"github.com/spanwatch/spanwatch/detector"
	"github.com/spanwatch/spanwatch/metrics"
	"github.com/spanwatch/spanwatch/notify"
	"github.com/spanwatch/spanwatch/policy"
	"github.com/spanwatch/spanwatch/snapshot"
)

// agentConfig is what run, demo and top share: where the rules come from
// and what to do with each snapshot.
type agentConfig struct {
	log *slog.Logger
	// rules is the loaded rule file; path, when set, is reloaded on SIGHUP
	// and when it (or a file it references) changes.
	rules *policy.Config
	path  string
	opts  collectorOptions
	// output receives each snapshot as one JSON line, when set.
	output io.Writer
	// metricsAddr serves /metrics and /snapshot, when set.
	metricsAddr string
	// notifier overrides the webhooks of the rule file (the demo prints
	// alerts instead).
	notifier alert.Notifier
	// onSnapshot and onAlerts are called from the loop, for rendering.
	onSnapshot func(*snapshot.Snapshot)
	onAlerts   func([]*alert.Alert)
	// ready is called once the collector is attached.
	ready func(*collector.Collector)
	// stop ends the loop after this long, when positive.
	stop time.Duration
}

// runAgent collects, evaluates and delivers until ctx is done.
func runAgent(ctx context.Context, cfg agentConfig) error {
	log := cfg.log
	opts, err := cfg.opts.merge(cfg.rules)
	if err != nil {
		return usageErrorf("%v", err)
	}

	var dispatcher *notify.Dispatcher
	notifier := cfg.notifier
	if notifier == nil && cfg.rules.Webhooks.Kind != 0 {
		ncfg, err := notify.ParseConfig(cfg.rules.Name, &cfg.rules.Webhooks, &cfg.rules.Routing)
		if err != nil {
			return err
		}
		if dispatcher, err = notify.New(ncfg, notify.Options{Logger: log}); err != nil {
			return fmt.Errorf("start notifier: %w", err)
		}
		defer dispatcher.Close()
		notifier = dispatcher
	}
	var exporter *metrics.Exporter
	if cfg.metricsAddr != "" {
		if exporter, err = metrics.NewExporter(metrics.Config{Logger: log}); err != nil {
			return err
		}
	}
	dcfg := detector.Config{Logger: log, Notifier: notifier}
	if exporter != nil {
		dcfg.OnRuleError = func(rule string, _ error) { exporter.RuleError(rule) }
	}
	det := detector.New(dcfg)
	det.SetRules(cfg.rules)

	ccfg := opts.collectorConfig(log)
	ccfg.OnOverrun = func(ov snapshot.Overrun) {
		a, err := det.Overrun(ctx, ov)
		if err != nil {
			log.Warn("overrun_alert_failed", "span", ov.Span, "error", err)
		}
		if a != nil && cfg.onAlerts != nil {
			cfg.onAlerts([]*alert.Alert{a})
		}
	}
	col, err := collector.New(ctx, ccfg)
	if err != nil {
		return err
	}
	defer col.Close()
	if err := applyBudgets(col, cfg.rules); err != nil {
		return err
	}
	usdtTracer, err := attachUSDT(ctx, col, cfg.rules, log)
	if err != nil {
		return err
	}
	if usdtTracer != nil {
		defer usdtTracer.Close()
	}
	tracepoints, err := attachTracepoints(ctx, col, cfg.rules)
	if err != nil {
		return err
	}
	if tracepoints != nil {
		defer tracepoints.Close()
	}
	if ok, how := col.UserEventsAttached(); ok {
		log.Info("user_events_attached", "method", how)
	}
	if cfg.ready != nil {
		cfg.ready(col)
	}

	var last lastSnapshot
	if exporter != nil {
		if dispatcher != nil {
			exporter.Registry().MustRegister(notify.NewCollector(dispatcher))
		}
		registerAgentMetrics(exporter.Registry(), det)
		mux := http.NewServeMux()
		mux.Handle("/metrics", exporter.Handler())
		mux.Handle("/snapshot", &last)
		srv := &http.Server{Addr: cfg.metricsAddr, Handler: mux, ReadHeaderTimeout: 5 * time.Second}
		go func() {
			if err := srv.ListenAndServe(); err != nil && !errors.Is(err, http.ErrServerClosed) {
				log.Error("metrics_server_failed", "addr", cfg.metricsAddr, "error", err)
			}
		}()
		defer srv.Close()
		log.Info("serving_metrics", "addr", cfg.metricsAddr)
	}

	reload := make(chan os.Signal, 1)
	signal.Notify(reload, syscall.SIGHUP)
	defer signal.Stop(reload)
	watch := newFileWatch(cfg.rules.Files)

	tick := time.NewTicker(opts.Interval)
	defer tick.Stop()
	var stopC <-chan time.Time
	if cfg.stop > 0 {
		stopC = time.After(cfg.stop)
	}
	enc := json.NewEncoder(io.Discard)
	if cfg.output != nil {
		enc = json.NewEncoder(cfg.output)
	}
	log.Info("started", "interval", opts.Interval, "rules", len(cfg.rules.Rules), "policies", len(cfg.rules.Policies), "budgets", len(cfg.rules.Budgets))
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-stopC:
			return nil
		case <-reload:
			cfg.rules = reloadRules(cfg, det, col, dispatcher, log, "sighup")
			watch = newFileWatch(cfg.rules.Files)
		case <-tick.C:
			if cfg.path != "" && watch.changed() {
				cfg.rules = reloadRules(cfg, det, col, dispatcher, log, "file_changed")
				watch = newFileWatch(cfg.rules.Files)
			}
			snap, err := col.Snapshot()
			if err != nil {
				log.Error("snapshot_failed", "error", err)
				continue
			}
			start := time.Now()
			changed, err := det.Evaluate(ctx, snap)
			if err != nil {
				log.Warn("evaluation_failed", "error", err)
			}
			if exporter != nil {
				exporter.Observe(snap)
				exporter.ObserveEvaluation(time.Since(start))
			}
			last.set(snap)
			if err := enc.Encode(snap); err != nil {
				return fmt.Errorf("write snapshot: %w", err)
			}
			if cfg.onSnapshot != nil {
				cfg.onSnapshot(snap)
			}
			if len(changed) > 0 && cfg.onAlerts != nil {
				cfg.onAlerts(changed)
			}
		}
	}
}

// reloadRules loads the rule file again; a bad file (rules, policies or
// webhooks) keeps all of the old configuration running.
func reloadRules(cfg agentConfig, det *detector.Detector, col *collector.Collector, dispatcher *notify.Dispatcher, log *slog.Logger, why string) *policy.Config {
	if cfg.path == "" {
		return cfg.rules
	}
	fail := func(err error) *policy.Config {
		reloadFailures.Add(1)
		log.Error("reload_failed", "file", cfg.path, "trigger", why, "error", err, "keeping", "previous configuration")
		return cfg.rules
	}
	rules, err := policy.LoadFile(cfg.path)
	if err != nil {
		return fail(err)
	}
	if dispatcher != nil {
		ncfg, err := notify.ParseConfig(rules.Name, &rules.Webhooks, &rules.Routing)
		if err != nil {
			return fail(err)
		}
		if err := dispatcher.Reload(ncfg); err != nil {
			return fail(err)
		}
	}
	det.SetRules(rules)
	if err := applyBudgets(col, rules); err != nil {
		log.Error("reload_budgets_failed", "error", err)
	}
	log.Info("reloaded", "file", cfg.path, "trigger", why, "rules", len(rules.Rules), "policies", len(rules.Policies))
	return rules
}

// applyBudgets pushes the rule file's budgets into the kernel, in file
// order (exact names win over globs; among globs the first wins).
func applyBudgets(col *collector.Collector, rules *policy.Config) error {
	return col.SetBudgets(budgetRules(rules))
}

func budgetRules(rules *policy.Config) []collector.BudgetRule {
	out := make([]collector.BudgetRule, 0, len(rules.Budgets))
	for _, b := range rules.Budgets {
		out = append(out, collector.BudgetRule{Span: b.Span.String(), Budget: b.Budget, NoUserStack: !b.CaptureStack})
	}
	return out
}

// lastSnapshot serves the newest snapshot as JSON.
type lastSnapshot struct {
	mu sync.Mutex
	s  *snapshot.Snapshot
}

func (l *lastSnapshot) set(s *snapshot.Snapshot) {
	l.mu.Lock()
	l.s = s
	l.mu.Unlock()
}

func (l *lastSnapshot) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	l.mu.Lock()
	s := l.s
	l.mu.Unlock()
	if s == nil {
		http.Error(w, "no snapshot yet", http.StatusServiceUnavailable)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	s.Encode(w)
}
