package detector

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

	"github.com/spanwatch/spanwatch/policy"
)

// ReloaderConfig configures a Reloader.
type ReloaderConfig struct {
	Logger *slog.Logger
	// Path is the rule file.
	Path string
	// Detector receives each rule set that loads.
	Detector *Detector
	// Interval is how often the files are checked (default 5s; negative
	// disables polling, leaving Reload to SIGHUP).
	Interval time.Duration
	// OnReload, if set, is called with each new rule set after the
	// detector has it (the notifier and the collector re-read their
	// sections and budgets from it).
	OnReload func(*policy.Config)
}

// A Reloader keeps a Detector's rules in step with the rule file. It polls
// the rule file and every Rego and data file it names (size and mtime, then
// a hash of the contents to ignore touches), and reloads on Reload (wire it
// to SIGHUP). A file that fails to load leaves the running rules in place;
// the failure is logged and counted, and the same broken contents are not
// retried until they change again.
type Reloader struct {
	cfg ReloaderConfig
	log *slog.Logger

	mu        sync.Mutex // serializes loads
	stamps    map[string]stamp
	hash      [32]byte // of the files that loaded
	badHash   [32]byte // of the files that last failed
	lastError error

	reloads  atomic.Uint64
	failures atomic.Uint64
}

type stamp struct {
	size  int64
	mtime time.Time
	ok    bool
}

// ReloadStats count reloads.
type ReloadStats struct {
	Reloads   uint64 // rule sets loaded after the first
	Failures  uint64 // loads that failed; the old rules stayed
	LastError error  // nil once a load succeeds
}

// NewReloader returns a Reloader; call Load once, then Run.
func NewReloader(cfg ReloaderConfig) *Reloader {
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Interval == 0 {
		cfg.Interval = 5 * time.Second
	}
	return &Reloader{cfg: cfg, log: cfg.Logger}
}

// Load reads the rule file and, if it is valid, hands it to the detector.
// Use it for the first load, where an error should stop the agent.
func (r *Reloader) Load() (*policy.Config, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.load()
}

func (r *Reloader) load() (*policy.Config, error) {
	cfg, err := policy.LoadFile(r.cfg.Path)
	if err != nil {
		return nil, err
	}
	stamps, sum := fingerprint(cfg.Files)
	r.cfg.Detector.SetRules(cfg)
	r.stamps, r.hash, r.lastError = stamps, sum, nil
	if r.cfg.OnReload != nil {
		r.cfg.OnReload(cfg)
	}
	return cfg, nil
}

// Reload loads the rule file now, whatever changed (SIGHUP). On error the
// running rules stay; the error is logged, counted and returned.
func (r *Reloader) Reload() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.reload()
}

func (r *Reloader) reload() error {
	cfg, err := r.load()
	if err != nil {
		r.failures.Add(1)
		r.lastError = err
		_, r.badHash = fingerprint(r.watched())
		r.log.Error("rules_reload_failed", "path", r.cfg.Path, "err", err)
		return fmt.Errorf("reload %s: %w", r.cfg.Path, err)
	}
	r.reloads.Add(1)
	r.log.Info("rules_reloaded", "path", r.cfg.Path, "rules", len(cfg.Rules), "policies", len(cfg.Policies), "budgets", len(cfg.Budgets))
	return nil
}

// watched is the files the current rules came from; before the first load,
// just the rule file.
func (r *Reloader) watched() []string {
	if cfg := r.cfg.Detector.Rules(); cfg != nil && len(cfg.Files) > 0 {
		return cfg.Files
	}
	return []string{r.cfg.Path}
}

// Run polls until ctx is done.
func (r *Reloader) Run(ctx context.Context) error {
	if r.cfg.Interval < 0 {
		<-ctx.Done()
		return nil
	}
	t := time.NewTicker(r.cfg.Interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
			r.Check()
		}
	}
}

// Check reloads if a watched file changed since the last load, and
// reports whether it reloaded successfully.
func (r *Reloader) Check() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	files := r.watched()
	changed := len(files) != len(r.stamps)
	for _, f := range files {
		if statStamp(f) != r.stamps[f] {
			changed = true
			break
		}
	}
	if !changed {
		return false
	}
	stamps, sum := fingerprint(files)
	if sum == r.hash {
		r.stamps = stamps // touched, not changed
		return false
	}
	if sum == r.badHash {
		return false // still the contents that failed
	}
	return r.reload() == nil
}

// Stats returns the reload counters.
func (r *Reloader) Stats() ReloadStats {
	r.mu.Lock()
	defer r.mu.Unlock()
	return ReloadStats{Reloads: r.reloads.Load(), Failures: r.failures.Load(), LastError: r.lastError}
}

func statStamp(name string) stamp {
	fi, err := os.Stat(name)
	if err != nil {
		return stamp{}
	}
	return stamp{size: fi.Size(), mtime: fi.ModTime(), ok: true}
}

// fingerprint stats and hashes the files; a missing file hashes as its
// name alone, so its disappearance and return are both changes.
func fingerprint(files []string) (map[string]stamp, [32]byte) {
	stamps := make(map[string]stamp, len(files))
	h := sha256.New()
	for _, name := range files {
		stamps[name] = statStamp(name)
		io.WriteString(h, name)
		h.Write([]byte{0})
		f, err := os.Open(name)
		if err != nil {
			if !errors.Is(err, os.ErrNotExist) {
				io.WriteString(h, err.Error())
			}
			h.Write([]byte{1})
			continue
		}
		io.Copy(h, io.LimitReader(f, policy.MaxFileBytes+1))
		f.Close()
		h.Write([]byte{0})
	}
	var sum [32]byte
	h.Sum(sum[:0])
	return stamps, sum
}
