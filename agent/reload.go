//go:build linux

package agent

import (
	"fmt"
	"time"

	"github.com/spanwatch/spanwatch/collector"
	"github.com/spanwatch/spanwatch/config"
)

// subscribe hands each part of the agent that applies a section live to
// the configuration's coordinator (package config), which prepares them
// all and commits them all, or none, on every reload. In commit order:
//
//   - webhooks and routing: the dispatcher builds the new webhooks; its
//     commit regroups the outbox, the one step that can fail, so it goes
//     first and undoes itself when it does;
//   - budgets: written into the kernel's set of budgets not in force;
//     committed with one store of the kernel's budget word;
//   - rules: the rules, Rego policies, external labels and policy limits,
//     swapped into the detector at once (one policy.Config);
//   - the listener's external_url, where alerts' generatorURL points;
//   - the interval, which the loop's ticker takes.
//
// Settings only a restart applies keep their running values (the
// coordinator logs each as an error saying so), and the rest of the file
// applies, so that fixing a rule during an incident is not held up by an
// unrelated edit that waits for the next restart;
// spanwatch_config_restart_pending and /api/status show what waits.
func (a *Agent) subscribe() {
	if a.dispatcher != nil {
		a.coord.Subscribe(func(next *config.Config) (config.Step, error) {
			// next.Notify is never nil while a dispatcher runs: a file
			// without webhooks: keeps the running ones until a restart.
			p, err := a.dispatcher.PrepareReload(next.Notify)
			if err != nil {
				return config.Step{}, fmt.Errorf("webhooks: %w", err)
			}
			return config.Step{Commit: p.Commit}, nil
		})
	}
	a.coord.Subscribe(
		func(next *config.Config) (config.Step, error) {
			a.mu.Lock()
			col := a.col
			a.mu.Unlock()
			if col == nil {
				return config.Step{}, nil // not running yet: Run applies them when it starts
			}
			ch, err := col.PrepareBudgets(config.BudgetRules(next.Rules))
			if err != nil {
				return config.Step{}, fmt.Errorf("budgets: %w", err)
			}
			return config.Step{Commit: ch.Commit, Abort: ch.Abort}, nil
		},
		func(next *config.Config) (config.Step, error) {
			return config.Step{Commit: func() error { a.det.SetRules(next.Rules); return nil }}, nil
		},
		func(next *config.Config) (config.Step, error) {
			return config.Step{Commit: func() error { a.externalURLs.Store(&next.ExternalURL); return nil }}, nil
		},
		func(next *config.Config) (config.Step, error) {
			return config.Step{Commit: func() error { a.setInterval(next.Collector.Interval); return nil }}, nil
		},
	)
}

// setInterval hands a reloaded interval to the loop, which resets its
// ticker.
func (a *Agent) setInterval(d time.Duration) {
	a.mu.Lock()
	col := a.col
	a.mu.Unlock()
	if col == nil {
		return // not running yet: Run takes the running configuration's
	}
	select {
	case <-a.interval:
	default:
	}
	a.interval <- d
}

// applyBudgets pushes the configuration's budgets into the kernel, at
// start.
func applyBudgets(col *collector.Collector, cfg *config.Config) error {
	return col.SetBudgets(config.BudgetRules(cfg.Rules))
}
