package config

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/spanwatch/spanwatch/config/section"
	"github.com/spanwatch/spanwatch/internal/crashpoint"
)

// DefaultReloadInterval is how often a Coordinator polls its files unless
// told otherwise: often enough that an edit reverted a few seconds later
// is still seen, and cheap (a stat per file; contents are hashed only when
// a stat changed).
const DefaultReloadInterval = time.Second

// A Subscriber applies its part of each configuration a reload brings.
// It is called with the configuration that is to run (the file's, with
// the settings that wait for a restart kept at their running values) and
// prepares its change without changing what runs: the budgets written
// into the kernel's set not in force, the webhooks built. It returns the
// Step that puts the change in force, or an error that fails the whole
// reload.
type Subscriber func(next *Config) (Step, error)

// A Step is one subscriber's prepared change. Commit puts it in force;
// Abort drops it. Either may be nil (nothing to do). Only the first
// subscriber's Commit may fail, and it undoes itself when it does: the
// others' commits are pointer swaps and single stores.
type Step struct {
	Commit func() error
	Abort  func()
}

// CoordinatorConfig configures a Coordinator.
type CoordinatorConfig struct {
	Logger *slog.Logger
	// Interval is how often the files are checked (default
	// DefaultReloadInterval; negative disables polling, leaving Reload to
	// SIGHUP).
	Interval time.Duration
}

// A Coordinator keeps a running configuration in step with its file, as
// Alertmanager's config.Coordinator does, but as a transaction: each
// reload loads the whole file (Load, the same as check and run), works out
// what only a restart applies (those settings keep their running values,
// each logged as an error saying so), then asks every subscriber to
// prepare its part, and only when all have, commits them all; when any
// refuses, the prepared ones are aborted and nothing changes. The kernel
// switches budget sets with one store, so spans are judged by the old
// budgets or the new, never a mix.
//
// It polls the configuration file and every file it names (size and
// mtime, then a hash of the contents to ignore touches), and reloads on
// Reload (wire it to SIGHUP). A file that fails to load or to prepare
// leaves the running configuration in place; the failure is logged and
// counted, and the same broken contents are not retried until they change
// again. Files are fingerprinted before they are read, so an edit that
// lands while a load is under way is seen by the next Check rather than
// taken for the contents that loaded.
//
// A configuration without a Path (parsed from memory) is never reloaded:
// Reload fails and Run only waits.
type Coordinator struct {
	cfg  CoordinatorConfig
	log  *slog.Logger
	path string
	opts LoadOptions

	mu      sync.Mutex // serializes loads, and guards what follows
	subs    []Subscriber
	files   map[string]fileState
	hash    [32]byte // of the files that loaded
	badHash [32]byte // of the files that last failed

	// state guards what readers ask for while a reload may be under way
	// (GET /api/status): they never wait for a load.
	state     sync.Mutex
	running   *Config
	pending   []RestartChange
	lastError error

	reloads  atomic.Uint64
	failures atomic.Uint64
}

// fileState is what a poll compares (stamp) and, once the stamp changed,
// what tells a touch from an edit (sum, of the contents).
type fileState struct {
	stamp stamp
	sum   [32]byte
}

type stamp struct {
	size  int64
	mtime time.Time
	ok    bool
}

// ReloadStats count reloads.
type ReloadStats struct {
	Reloads   uint64 // configurations applied after the first
	Failures  uint64 // loads that failed; the running configuration stayed
	LastError error  // nil once a load succeeds
}

// NewCoordinator returns a Coordinator for cfg, as Load or Parse returned
// it: its file and command-line options are what each reload loads. Call
// Load once, then Subscribe and Run.
func NewCoordinator(cfg *Config, c CoordinatorConfig) *Coordinator {
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.Interval == 0 {
		c.Interval = DefaultReloadInterval
	}
	return &Coordinator{cfg: c, log: c.Logger, path: cfg.Path, opts: cfg.opts, running: cfg}
}

// Load reads the file again, fingerprinting it (and every file it names)
// before, and makes what it read the running configuration, which it
// returns; subscribers are not called: what starts the agent applies the
// first configuration itself. Use it once, at start, where an error should
// stop the agent. Without a file, it returns the configuration given to
// NewCoordinator.
func (c *Coordinator) Load() (*Config, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.path == "" {
		return c.Config(), nil
	}
	c.setRunning(nil, nil)
	cfg, _, err := c.load()
	return cfg, err
}

func (c *Coordinator) setRunning(cfg *Config, pending []RestartChange) {
	c.state.Lock()
	c.running, c.pending = cfg, pending
	c.state.Unlock()
}

// Subscribe adds subscribers, which each reload prepares and commits in
// the order they were added.
func (c *Coordinator) Subscribe(s ...Subscriber) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.subs = append(c.subs, s...)
}

// Reloadable reports whether the configuration came from a file.
func (c *Coordinator) Reloadable() bool { return c.path != "" }

// load reads the files and, on a reload, applies what they hold through
// the subscribers; on failure it returns the hash of the contents that
// failed. c.mu is held.
func (c *Coordinator) load() (*Config, [32]byte, error) {
	watched := c.watched()
	before := fingerprint(watched)
	beforeSum := combine(watched, before)
	next, err := Load(c.path, c.opts)
	if err != nil {
		return nil, beforeSum, err
	}
	var changes []RestartChange
	if running := c.Config(); running != nil {
		changes = restartChanges(running, next)
		next = keepRunning(running, next, changes)
		if err := c.apply(next); err != nil {
			return nil, beforeSum, err
		}
		for _, ch := range changes {
			c.log.Error("reload_needs_restart", "path", c.path, "setting", ch.Key, "running", ch.Old, "file", ch.New,
				"action", "restart spanwatch to apply it; the rest of the file is applied")
		}
	}
	// Files the new configuration names for the first time (a policy
	// added) are fingerprinted now, after they were read; the others keep
	// their state from before the read.
	names := next.Files()
	files := make(map[string]fileState, len(names))
	var added []string
	for _, f := range names {
		if st, ok := before[f]; ok {
			files[f] = st
		} else {
			added = append(added, f)
		}
	}
	for f, st := range fingerprint(added) {
		files[f] = st
	}
	c.state.Lock()
	c.running, c.pending, c.lastError = next, changes, nil
	c.state.Unlock()
	c.files, c.hash = files, combine(names, files)
	return next, [32]byte{}, nil
}

// apply prepares every subscriber's part of next, then commits them all,
// or aborts the prepared ones when one refuses.
func (c *Coordinator) apply(next *Config) error {
	steps := make([]Step, 0, len(c.subs))
	abort := func(steps []Step) {
		for _, s := range steps {
			if s.Abort != nil {
				s.Abort()
			}
		}
	}
	for _, sub := range c.subs {
		s, err := sub(next)
		if err != nil {
			abort(steps)
			return err
		}
		steps = append(steps, s)
	}
	crashpoint.Hit("reload")
	for i, s := range steps {
		if s.Commit == nil {
			continue
		}
		if err := s.Commit(); err != nil {
			abort(steps[i+1:])
			return err
		}
	}
	return nil
}

// Reload loads the file now, whatever changed (SIGHUP). On error the
// running configuration stays; the error is logged, counted and
// returned.
func (c *Coordinator) Reload() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.path == "" {
		return errors.New("reload: the configuration is built in, not from a file")
	}
	return c.reload()
}

func (c *Coordinator) reload() error {
	cfg, bad, err := c.load()
	if err != nil {
		c.failures.Add(1)
		c.state.Lock()
		c.lastError = err
		c.state.Unlock()
		c.badHash = bad
		c.log.Error("rules_reload_failed", "path", c.path, "error", err)
		return fmt.Errorf("reload %s: %w", c.path, err)
	}
	c.reloads.Add(1)
	c.log.Info("rules_reloaded", "path", c.path, "rules", len(cfg.Rules.Rules), "policies", len(cfg.Rules.Policies), "budgets", len(cfg.Rules.Budgets))
	return nil
}

// watched is the files the running configuration came from; before the
// first load, just the configuration file.
func (c *Coordinator) watched() []string {
	if running := c.Config(); running != nil {
		if f := running.Files(); len(f) > 0 {
			return f
		}
	}
	return []string{c.path}
}

// Run polls until ctx is done.
func (c *Coordinator) Run(ctx context.Context) error {
	if c.cfg.Interval < 0 || c.path == "" {
		<-ctx.Done()
		return nil
	}
	t := time.NewTicker(c.cfg.Interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
			c.Check()
		}
	}
}

// Check reloads if a watched file changed since the last load, and
// reports whether it reloaded successfully.
func (c *Coordinator) Check() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.path == "" {
		return false
	}
	files := c.watched()
	changed := len(files) != len(c.files)
	for _, f := range files {
		if statStamp(f) != c.files[f].stamp {
			changed = true
			break
		}
	}
	if !changed {
		return false
	}
	now := fingerprint(files)
	sum := combine(files, now)
	if sum == c.hash {
		c.files = now // touched, not changed
		return false
	}
	if sum == c.badHash {
		return false // still the contents that failed
	}
	return c.reload() == nil
}

// Config returns the configuration that runs now.
func (c *Coordinator) Config() *Config {
	c.state.Lock()
	defer c.state.Unlock()
	return c.running
}

// Pending returns what the configuration file changes that only a
// restart applies; empty when what runs is what the file says.
func (c *Coordinator) Pending() []RestartChange {
	c.state.Lock()
	defer c.state.Unlock()
	return append([]RestartChange(nil), c.pending...)
}

// Stats returns the reload counters.
func (c *Coordinator) Stats() ReloadStats {
	c.state.Lock()
	defer c.state.Unlock()
	return ReloadStats{Reloads: c.reloads.Load(), Failures: c.failures.Load(), LastError: c.lastError}
}

func statStamp(name string) stamp {
	fi, err := os.Stat(name)
	if err != nil {
		return stamp{}
	}
	return stamp{size: fi.Size(), mtime: fi.ModTime(), ok: true}
}

// fingerprint stats and hashes each file; a missing file hashes as nothing
// but the fact, so its disappearance and return are both changes.
func fingerprint(files []string) map[string]fileState {
	out := make(map[string]fileState, len(files))
	for _, name := range files {
		st := fileState{stamp: statStamp(name)}
		h := sha256.New()
		f, err := os.Open(name)
		if err != nil {
			if !errors.Is(err, os.ErrNotExist) {
				io.WriteString(h, err.Error())
			}
			h.Write([]byte{1})
		} else {
			io.Copy(h, io.LimitReader(f, section.MaxFileBytes+1))
			f.Close()
			h.Write([]byte{0})
		}
		h.Sum(st.sum[:0])
		out[name] = st
	}
	return out
}

// combine hashes the files' names and content hashes in order.
func combine(files []string, states map[string]fileState) [32]byte {
	h := sha256.New()
	for _, name := range files {
		io.WriteString(h, name)
		h.Write([]byte{0})
		sum := states[name].sum
		h.Write(sum[:])
	}
	var sum [32]byte
	h.Sum(sum[:0])
	return sum
}
