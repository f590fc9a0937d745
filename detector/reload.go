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

// DefaultReloadInterval is how often a Reloader polls its files unless
// told otherwise: often enough that an edit reverted a few seconds later
// is still seen, and cheap (a stat per file; contents are hashed only when
// a stat changed).
const DefaultReloadInterval = time.Second

// ReloaderConfig configures a Reloader.
type ReloaderConfig struct {
	Logger *slog.Logger
	// Path is the rule file.
	Path string
	// Detector receives each rule set that loads.
	Detector *Detector
	// Interval is how often the files are checked (default
	// DefaultReloadInterval; negative disables polling, leaving Reload to
	// SIGHUP).
	Interval time.Duration
	// Load, if set, reads the rule file in place of policy.LoadFile: the
	// agent validates every section of the file there, not only the rules.
	// Besides the rule set it returns commit, which applies what the
	// detector does not hold (the webhooks, say). commit runs before the
	// detector gets the new rules; when it fails, the reload fails and the
	// running configuration stays whole. commit may be nil.
	Load func(path string) (rules *policy.Config, commit func() error, err error)
	// OnReload, if set, is called with each new rule set after the
	// detector has it (the collector re-reads its budgets from it).
	OnReload func(*policy.Config)
}

// A Reloader keeps a Detector's rules in step with the rule file. It polls
// the rule file and every Rego and data file it names (size and mtime, then
// a hash of the contents to ignore touches), and reloads on Reload (wire it
// to SIGHUP). A file that fails to load leaves the running rules in place;
// the failure is logged and counted, and the same broken contents are not
// retried until they change again.
//
// Files are fingerprinted before they are read, so an edit that lands while
// a load is under way is seen by the next Check rather than taken for the
// contents that loaded.
type Reloader struct {
	cfg ReloaderConfig
	log *slog.Logger

	mu        sync.Mutex // serializes loads
	files     map[string]fileState
	hash      [32]byte // of the files that loaded
	badHash   [32]byte // of the files that last failed
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
		cfg.Interval = DefaultReloadInterval
	}
	return &Reloader{cfg: cfg, log: cfg.Logger}
}

// Load reads the rule file and, if it is valid, hands it to the detector.
// Use it for the first load, where an error should stop the agent.
func (r *Reloader) Load() (*policy.Config, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	cfg, _, err := r.load()
	return cfg, err
}

// load reads the files and installs them; on failure it returns the hash
// of the contents that failed.
func (r *Reloader) load() (*policy.Config, [32]byte, error) {
	watched := r.watched()
	before := fingerprint(watched)
	beforeSum := combine(watched, before)
	var (
		cfg    *policy.Config
		commit func() error
		err    error
	)
	if r.cfg.Load != nil {
		cfg, commit, err = r.cfg.Load(r.cfg.Path)
	} else {
		cfg, err = policy.LoadFile(r.cfg.Path)
	}
	if err == nil && commit != nil {
		err = commit()
	}
	if err != nil {
		return nil, beforeSum, err
	}
	// Files the new rules name for the first time (a policy added) are
	// fingerprinted now, after they were read; the others keep their
	// state from before the read.
	files := make(map[string]fileState, len(cfg.Files))
	var added []string
	for _, f := range cfg.Files {
		if st, ok := before[f]; ok {
			files[f] = st
		} else {
			added = append(added, f)
		}
	}
	for f, st := range fingerprint(added) {
		files[f] = st
	}
	r.cfg.Detector.SetRules(cfg)
	r.files, r.hash, r.lastError = files, combine(cfg.Files, files), nil
	if r.cfg.OnReload != nil {
		r.cfg.OnReload(cfg)
	}
	return cfg, [32]byte{}, nil
}

// Reload loads the rule file now, whatever changed (SIGHUP). On error the
// running rules stay; the error is logged, counted and returned.
func (r *Reloader) Reload() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.reload()
}

func (r *Reloader) reload() error {
	cfg, bad, err := r.load()
	if err != nil {
		r.failures.Add(1)
		r.lastError = err
		r.badHash = bad
		r.log.Error("rules_reload_failed", "path", r.cfg.Path, "error", err)
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
	changed := len(files) != len(r.files)
	for _, f := range files {
		if statStamp(f) != r.files[f].stamp {
			changed = true
			break
		}
	}
	if !changed {
		return false
	}
	now := fingerprint(files)
	sum := combine(files, now)
	if sum == r.hash {
		r.files = now // touched, not changed
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
			io.Copy(h, io.LimitReader(f, policy.MaxFileBytes+1))
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
