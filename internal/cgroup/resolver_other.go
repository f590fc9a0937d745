//go:build !linux

package cgroup

import (
	"errors"
	"log/slog"
	"time"
)

// DefaultMinRefresh is how often, at most, a Resolver walks the cgroup tree
// again because it met an unknown id.
const DefaultMinRefresh = time.Second

// DefaultDetailsTTL is how long a Resolver keeps a cgroup's names and
// process name before it reads them again.
const DefaultDetailsTTL = 30 * time.Second

// RootEnv names the environment variable that overrides FindRoot.
const RootEnv = "SPANWATCH_CGROUP_ROOT"

// Config configures a Resolver.
type Config struct {
	Root       string
	MinRefresh time.Duration
	Logger     *slog.Logger
	ProcRoot   string
	Names      *Names
	DetailsTTL time.Duration
}

// A Resolver maps cgroup v2 ids to paths; cgroups exist only on Linux.
type Resolver struct{}

var errNotLinux = errors.New("cgroup resolver: cgroups exist only on Linux")

// NewResolver fails: cgroups exist only on Linux.
func NewResolver(Config) (*Resolver, error) { return nil, errNotLinux }

// Resolve returns an empty Info.
func (r *Resolver) Resolve(uint64) Info { return Info{} }

// Refresh fails: cgroups exist only on Linux.
func (r *Resolver) Refresh() error { return errNotLinux }

// FindRoot fails: cgroups exist only on Linux.
func FindRoot() (string, error) { return "", errNotLinux }
