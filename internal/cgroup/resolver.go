//go:build linux

package cgroup

import (
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// DefaultMinRefresh is how often, at most, a Resolver walks the cgroup tree
// again because it met an unknown id.
const DefaultMinRefresh = time.Second

// DefaultDetailsTTL is how long a Resolver keeps a cgroup's Kubernetes
// names and process name before it reads them again.
const DefaultDetailsTTL = 30 * time.Second

// Config configures a Resolver.
type Config struct {
	// Root is the cgroup2 mount. Empty means FindRoot's answer.
	Root string
	// MinRefresh is the least time between two walks triggered by unknown
	// ids; 0 means DefaultMinRefresh. Ids that appear between walks resolve
	// to an Info with an empty Path until the next walk.
	MinRefresh time.Duration
	// Logger receives walk errors; nil discards them.
	Logger *slog.Logger
	// ProcRoot is where processes are read (/proc/PID/exe, comm) for
	// Info.Process; empty means /proc.
	ProcRoot string
	// Names finds the Kubernetes names of containers and pods; nil means
	// NewNames over the default directories, with MinRefresh.
	Names *Names
	// DetailsTTL is how long a cgroup's names and process name are kept
	// before they are read again (a cgroup's processes change); 0 means
	// DefaultDetailsTTL, negative never reads process names.
	DetailsTTL time.Duration
}

// A Resolver maps cgroup v2 ids to paths and what the paths name. It is
// safe for concurrent use.
type Resolver struct {
	root       string
	minRefresh time.Duration
	log        *slog.Logger
	now        func() time.Time
	procRoot   string
	names      *Names
	detailsTTL time.Duration

	mu       sync.RWMutex
	byID     map[uint64]Info // what the paths say, from the last walk
	workload map[uint64]Workload
	details  map[uint64]details
	lastWalk time.Time
	walks    int
}

// details is a cgroup's Info completed with names and its process, and
// when that was read.
type details struct {
	info Info
	at   time.Time
}

// NewResolver returns a Resolver for cfg.Root and walks it once, so the
// cgroups that exist now resolve without another walk.
func NewResolver(cfg Config) (*Resolver, error) {
	root := cfg.Root
	if root == "" {
		var err error
		if root, err = FindRoot(); err != nil {
			return nil, err
		}
	}
	if fi, err := os.Stat(root); err != nil {
		return nil, fmt.Errorf("cgroup root: %w", err)
	} else if !fi.IsDir() {
		return nil, fmt.Errorf("cgroup root %s: not a directory", root)
	}
	r := &Resolver{
		root:       filepath.Clean(root),
		minRefresh: cfg.MinRefresh,
		log:        cfg.Logger,
		now:        time.Now,
		byID:       map[uint64]Info{},
		details:    map[uint64]details{},
		procRoot:   cfg.ProcRoot,
		names:      cfg.Names,
		detailsTTL: cfg.DetailsTTL,
	}
	if r.minRefresh <= 0 {
		r.minRefresh = DefaultMinRefresh
	}
	if r.procRoot == "" {
		r.procRoot = "/proc"
	}
	if r.names == nil {
		r.names = NewNames(NamesConfig{MinRefresh: r.minRefresh})
	}
	if r.detailsTTL == 0 {
		r.detailsTTL = DefaultDetailsTTL
	}
	if r.log == nil {
		r.log = slog.New(slog.DiscardHandler)
	}
	if err := r.Refresh(); err != nil {
		return nil, err
	}
	return r, nil
}

// Root returns the cgroup2 mount the Resolver walks.
func (r *Resolver) Root() string { return r.root }

// Resolve returns what is known about cgroup id. An id not seen in the last
// walk triggers a new walk, unless one ran less than MinRefresh ago; an id
// still unknown after that gets an Info with an empty Path. The names and
// the process of a known id are read on its first Resolve and again once
// they are older than DetailsTTL.
func (r *Resolver) Resolve(id uint64) Info {
	now := r.now()
	r.mu.RLock()
	d, ok := r.details[id]
	r.mu.RUnlock()
	if ok && now.Sub(d.at) < r.ttl() {
		return d.info
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if d, ok := r.details[id]; ok && now.Sub(d.at) < r.ttl() {
		return d.info // another goroutine read it
	}
	info, ok := r.byID[id]
	if !ok {
		if now.Sub(r.lastWalk) < r.minRefresh {
			return Info{}
		}
		if err := r.walkLocked(); err != nil {
			r.log.Warn("cgroup_walk_failed", "root", r.root, "error", err)
		}
		if info, ok = r.byID[id]; !ok {
			return Info{}
		}
	}
	k := r.names.Lookup(info.ContainerID, info.PodUID)
	info.Namespace, info.Pod, info.Container = k.Namespace, k.Pod, k.Container
	if r.detailsTTL > 0 {
		info.Process, info.Service, info.Several = Processes(r.procRoot, filepath.Join(r.root, info.Path))
		if info.Process == "" && info.Service == "" && !info.Several {
			// The cgroup emptied (its processes exited between the span
			// and this read): the names it had still say who sent it.
			old := r.details[id].info
			info.Process, info.Service, info.Several = old.Process, old.Service, old.Several
		}
	}
	r.details[id] = details{info: info, at: now}
	return info
}

func (r *Resolver) ttl() time.Duration {
	if r.detailsTTL < 0 {
		return DefaultDetailsTTL
	}
	return r.detailsTTL
}

// Refresh walks the cgroup tree now, regardless of MinRefresh.
func (r *Resolver) Refresh() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.walkLocked()
}

// Walks returns how many times the Resolver has walked the tree.
func (r *Resolver) Walks() int {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return r.walks
}

// walkLocked rebuilds the id map from the tree. Cgroups that vanished are
// dropped, so the map holds what exists, not everything ever seen.
func (r *Resolver) walkLocked() error {
	r.lastWalk = r.now()
	r.walks++
	byID := make(map[uint64]Info, len(r.byID))
	wl := newWorkloadWalk(len(r.byID))
	err := filepath.WalkDir(r.root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			// A cgroup removed mid-walk is not an error.
			if errors.Is(err, fs.ErrNotExist) {
				return nil
			}
			return err
		}
		if !d.IsDir() {
			return nil
		}
		fi, err := d.Info()
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return fs.SkipDir
			}
			return err
		}
		st, ok := fi.Sys().(*syscall.Stat_t)
		if !ok {
			return fmt.Errorf("stat %s: no inode", p)
		}
		rel, err := filepath.Rel(r.root, p)
		if err != nil {
			return err
		}
		info := ParsePath(filepath.Clean("/" + rel))
		byID[st.Ino] = info
		wl.add(p, st.Ino, info, st.Uid == 0 && st.Mode&0o022 == 0)
		return nil
	})
	if err != nil {
		return fmt.Errorf("walk cgroups under %s: %w", r.root, err)
	}
	r.byID = byID
	r.workload = wl.out
	for id := range r.details {
		if _, ok := byID[id]; !ok {
			delete(r.details, id)
		}
	}
	return nil
}

// Workloads returns the workload of every cgroup the last walk found (see
// Workload), and the number of walks so far, which changes when the
// answer may have. The map is the Resolver's: read it, do not change it.
func (r *Resolver) Workloads() (map[uint64]Workload, int) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return r.workload, r.walks
}

// ID returns the cgroup v2 id of the cgroup directory at path: the number
// bpf_get_current_cgroup_id returns for its processes (kernel 5.5+, where
// kernfs inode numbers are the 64-bit cgroup ids).
func ID(path string) (uint64, error) {
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		return 0, fmt.Errorf("cgroup id of %s: %w", path, err)
	}
	return st.Ino, nil
}

// RootEnv names the environment variable that overrides FindRoot: the
// cgroup2 mount to walk. A container sees only its own cgroup namespace at
// /sys/fs/cgroup, so an agent in a pod mounts the host's tree elsewhere
// (deploy/kubernetes mounts it at /host/sys/fs/cgroup) and names it here.
const RootEnv = "SPANWATCH_CGROUP_ROOT"

// FindRoot returns the cgroup2 mount: $SPANWATCH_CGROUP_ROOT when set, else
// /sys/fs/cgroup on a unified host or /sys/fs/cgroup/unified on a hybrid
// one.
func FindRoot() (string, error) {
	if p := os.Getenv(RootEnv); p != "" {
		if !isCgroup2(p) {
			return "", fmt.Errorf("find cgroup2 mount: %s=%s is not a cgroup2 mount", RootEnv, p)
		}
		return p, nil
	}
	for _, p := range []string{"/sys/fs/cgroup", "/sys/fs/cgroup/unified"} {
		if isCgroup2(p) {
			return p, nil
		}
	}
	return "", fmt.Errorf("find cgroup2 mount: neither /sys/fs/cgroup nor /sys/fs/cgroup/unified is cgroup2; mount it with \"mount -t cgroup2 none /sys/fs/cgroup\" or set %s", RootEnv)
}

func isCgroup2(p string) bool {
	var st unix.Statfs_t
	return unix.Statfs(p, &st) == nil && st.Type == unix.CGROUP2_SUPER_MAGIC
}

// SeveralExecutables returns the cgroups of the last walk whose processes
// run more than one executable (Several): the collector keeps their
// series per process from its start, so that an agent's restart does not
// give their first spans to series without a process. It reads every
// cgroup's cgroup.procs and each process's executable link (on a host of
// a few thousand processes, milliseconds).
func (r *Resolver) SeveralExecutables() []uint64 {
	r.mu.RLock()
	paths := make(map[uint64]string, len(r.byID))
	for id, info := range r.byID {
		paths[id] = info.Path
	}
	r.mu.RUnlock()
	var out []uint64
	for id, p := range paths {
		if Several(r.procRoot, filepath.Join(r.root, p)) {
			out = append(out, id)
		}
	}
	return out
}
