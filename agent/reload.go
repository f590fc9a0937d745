//go:build linux

package agent

import (
	"github.com/spanwatch/spanwatch/notify"
	"github.com/spanwatch/spanwatch/policy"
)

// loadForReload reads the configuration file again, with the command
// line's values of the first load. Its commit installs what the file says,
// except what only a restart applies: those settings keep their running
// values, and each is logged as an error that says so. The rest of the
// file applies, so that fixing a rule during an incident is not held up
// by an unrelated edit that waits for the next restart;
// spanwatch_config_restart_pending and /api/status show what waits.
func (a *Agent) loadForReload(path string, opts LoadOptions) (*policy.Config, func() error, error) {
	next, err := Load(path, opts)
	if err != nil {
		return nil, nil, err
	}
	commit := func() error {
		a.mu.Lock()
		running := a.cfg
		a.mu.Unlock()
		if running == nil { // the first load
			a.mu.Lock()
			a.cfg = next
			a.mu.Unlock()
			return nil
		}
		changes := restartChanges(running, next)
		eff := keepRunning(running, next, changes)
		if a.dispatcher != nil {
			ncfg := eff.Notify
			if ncfg == nil {
				// The webhooks: section is gone: the dispatcher keeps its
				// outbox and delivers nothing more.
				ncfg = &notify.Config{File: running.Notify.File, Routing: running.Notify.Routing}
			}
			if err := a.dispatcher.Reload(ncfg); err != nil {
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
	return next.Rules, commit, nil
}

// applyReloaded applies what the collector takes live: the budgets, and
// the interval (the loop resets its ticker).
func (a *Agent) applyReloaded() {
	a.mu.Lock()
	cfg, col := a.cfg, a.col
	a.mu.Unlock()
	if col == nil {
		return // not running yet: Run applies cfg when it starts
	}
	if err := applyBudgets(col, cfg.Rules); err != nil {
		a.log.Error("reload_budgets_failed", "error", err)
	}
	select {
	case <-a.interval:
	default:
	}
	a.interval <- cfg.Collector.Interval
}
