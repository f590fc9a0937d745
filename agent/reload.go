//go:build linux

package agent

import (
	"fmt"

	"github.com/spanwatch/spanwatch/collector"
	"github.com/spanwatch/spanwatch/internal/crashpoint"
	"github.com/spanwatch/spanwatch/policy"
)

// loadForReload reads the configuration file again, with the command
// line's values of the first load, and prepares every section the running
// agent applies live: the budgets are written into the kernel's set not in
// force, the webhooks and routing are built. Nothing that runs changes
// until commit, which puts them all in force, or none: the one step that
// can fail (regrouping the outbox) goes first and undoes itself; the others
// cannot fail (one store of the kernel's budget word, pointer swaps). The
// detector takes the rules after commit. A step that fails to prepare
// fails the reload, which the reloader counts and reports
// (spanwatch_rule_reload_failures_total, /api/status), and the running
// configuration stays whole.
//
// Settings only a restart applies keep their running values, and each is
// logged as an error that says so. The rest of the file applies, so that
// fixing a rule during an incident is not held up by an unrelated edit
// that waits for the next restart; spanwatch_config_restart_pending and
// /api/status show what waits.
//
// This is the shape of a reload coordinator whose subscribers each
// prepare their section and then commit (reloadStep).
func (a *Agent) loadForReload(path string, opts LoadOptions) (*policy.Config, func() error, error) {
	next, err := Load(path, opts)
	if err != nil {
		return nil, nil, err
	}
	a.mu.Lock()
	running, col := a.cfg, a.col
	a.mu.Unlock()
	if running == nil { // the first load: New and Run apply it
		return next.Rules, func() error {
			a.mu.Lock()
			a.cfg = next
			a.mu.Unlock()
			return nil
		}, nil
	}
	changes := restartChanges(running, next)
	eff := keepRunning(running, next, changes)

	var steps []reloadStep
	abort := func() {
		for _, s := range steps {
			s.abort()
		}
	}
	if a.dispatcher != nil {
		// eff.Notify is never nil while a dispatcher runs: a file without
		// webhooks: keeps the running ones until a restart.
		p, err := a.dispatcher.PrepareReload(eff.Notify)
		if err != nil {
			return nil, nil, fmt.Errorf("webhooks: %w", err)
		}
		steps = append(steps, reloadStep{commit: p.Commit, abort: func() {}})
	}
	if col != nil {
		ch, err := col.PrepareBudgets(budgetRules(eff.Rules))
		if err != nil {
			abort()
			return nil, nil, fmt.Errorf("budgets: %w", err)
		}
		steps = append(steps, reloadStep{commit: ch.Commit, abort: ch.Abort})
	}
	commit := func() error {
		crashpoint.Hit("reload")
		for i, s := range steps {
			if err := s.commit(); err != nil {
				for _, rest := range steps[i+1:] {
					rest.abort()
				}
				return err
			}
		}
		for _, c := range changes {
			a.log.Error("reload_needs_restart", "path", path, "setting", c.Key, "running", c.Old, "file", c.New,
				"action", "restart spanwatch to apply it; the rest of the file is applied")
		}
		a.mu.Lock()
		a.cfg, a.pending = eff, changes
		a.mu.Unlock()
		return nil
	}
	return eff.Rules, commit, nil
}

// A reloadStep is one section's prepared change: commit puts it in force,
// abort drops it. Only the first step's commit may fail (it undoes itself
// when it does).
type reloadStep struct {
	commit func() error
	abort  func()
}

// applyReloaded hands a reloaded interval to the loop, which resets its
// ticker. The budgets were applied with the rest (loadForReload).
func (a *Agent) applyReloaded() {
	a.mu.Lock()
	cfg, col := a.cfg, a.col
	a.mu.Unlock()
	if col == nil {
		return // not running yet: Run applies cfg when it starts
	}
	select {
	case <-a.interval:
	default:
	}
	a.interval <- cfg.Collector.Interval
}

// applyBudgets pushes the configuration's budgets into the kernel, at
// start.
func applyBudgets(col *collector.Collector, rules *policy.Config) error {
	return col.SetBudgets(budgetRules(rules))
}
