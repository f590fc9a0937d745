package memory

import (
	"context"
	"log/slog"
	"sync"
	"time"
)

// A Level is how much detail the agent sheds: each level sheds its own
// detail and every level's below it. The package documentation gives the
// order and why.
type Level int

const (
	// None sheds nothing.
	None Level = iota
	// StackDetail cuts overrun stacks and the overruns kept per snapshot.
	StackDetail
	// UnusedHistory keeps each series' range history only as far back as
	// its own rules' ranges reach.
	UnusedHistory
	// StaleExports stops exporting series that left the kernel.
	StaleExports
	// HistoryDepth keeps only the newest range windows that fit.
	HistoryDepth

	// Top is the last level.
	Top = HistoryDepth
)

var levelNames = [...]string{"none", "stack_detail", "unused_range_history", "stale_exports", "range_history_depth"}

// String is the level's name as /metrics labels it.
func (l Level) String() string {
	if l < None || l > Top {
		return "unknown"
	}
	return levelNames[l]
}

// Levels returns every level that sheds something, in order.
func Levels() []Level {
	out := make([]Level, 0, Top)
	for l := StackDetail; l <= Top; l++ {
		out = append(out, l)
	}
	return out
}

// Thresholds at which the levels start, as a share of the budget: the
// Go memory in use (live heap after the last collection, stacks, runtime)
// plus the BPF maps plus the binary. Sizing keeps that near 60% at full
// series capacity, so that the collector has room to work below Go's soft
// limit; past 70% something grew that sizing did not plan for (a burst
// of overruns with deep stacks, concurrent scrapes, a large Rego input).
var enterAt = [Top + 1]float64{0, 0.70, 0.78, 0.86, 0.94}

// LeaveBelow is how far under its threshold usage must fall (a share of
// the budget), and Hold how long it must stay there, before a level is
// given back: shedding and restoring on every sample would churn the
// caches it empties.
const (
	LeaveBelow = 0.10
	Hold       = 30 * time.Second
)

// Usage is one measurement of the agent's memory.
type Usage struct {
	// Go is the Go memory in use: the heap live after the last
	// collection, goroutine stacks and the runtime's own (garbage not
	// yet collected is left out: Go's soft limit collects it).
	Go uint64
	// BPFMaps is the memory the kernel charges for the BPF maps.
	BPFMaps uint64
	// Binary is the resident code and data of the executable.
	Binary uint64
	// Cgroup is the cgroup's memory in use less its inactive file pages
	// (what the kernel would not reclaim first), 0 without a cgroup.
	Cgroup uint64
	// Events counts the times the kernel reclaimed at the cgroup's limit
	// so far (v2 memory.events high + max + oom, v1 memory.failcnt).
	Events uint64
	// CgroupLimit is the cgroup's memory limit (0: none).
	CgroupLimit uint64
}

// nearLimit says whether the cgroup's memory in use is within a tenth of
// its limit: reclaim there is pressure on the agent, where reclaim of a
// cgroup far from it is the page cache of --output making room.
func (u Usage) nearLimit() bool {
	return u.CgroupLimit == 0 || u.Cgroup >= u.CgroupLimit/10*9
}

// Total is what the budget holds: Go, the maps and the binary.
func (u Usage) Total() uint64 { return u.Go + u.BPFMaps + u.Binary }

// GovernorConfig configures a Governor.
type GovernorConfig struct {
	Logger *slog.Logger
	// Budget is the memory budget in bytes.
	Budget uint64
	// Apply is called with each new level, from the goroutine that
	// observed the change (Run's). Each part sets what it sheds.
	Apply func(Level)
}

// A Governor turns measurements into a level of shedding. It is safe for
// concurrent use.
type Governor struct {
	cfg GovernorConfig
	log *slog.Logger

	mu      sync.Mutex
	level   Level
	since   [Top + 1]time.Time // when each level now shed began
	calm    time.Time          // since when usage has been low enough to give back the top level
	events  uint64
	primed  bool
	last    Usage
	lastAt  time.Time
	changes uint64
}

// NewGovernor returns a governor at level None.
func NewGovernor(cfg GovernorConfig) *Governor {
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	return &Governor{cfg: cfg, log: cfg.Logger}
}

// Observe takes one measurement at now and returns the level it leads to,
// calling Apply when the level changed. A level starts when usage reaches
// its threshold, or one level up from the current when the cgroup's
// pressure events rose since the last measurement while its memory in use
// (less inactive file pages) is within a tenth of its limit (the kernel
// reclaimed at the limit, and not only the page cache of files the agent
// writes: the agent is nearer to the limit than its own figures say). A level
// ends when usage has stayed LeaveBelow under its threshold for Hold, one
// level at a time.
func (g *Governor) Observe(now time.Time, u Usage) Level {
	g.mu.Lock()
	prev := g.level
	frac := float64(u.Total()) / float64(g.cfg.Budget)
	want := None
	for l := Top; l > None; l-- {
		if frac >= enterAt[l] {
			want = l
			break
		}
	}
	if g.primed && u.Events > g.events && u.nearLimit() {
		want = max(want, min(prev+1, Top))
	}
	g.events, g.primed = u.Events, true
	g.last, g.lastAt = u, now
	level := prev
	switch {
	case want > prev:
		level = want
		g.calm = time.Time{}
	case want < prev && frac < enterAt[prev]-LeaveBelow:
		if g.calm.IsZero() {
			g.calm = now
		}
		if now.Sub(g.calm) >= Hold {
			level = prev - 1
			g.calm = now // the next level down waits its own Hold
		}
	default:
		g.calm = time.Time{}
	}
	if level != prev {
		for l := prev + 1; l <= level; l++ {
			g.since[l] = now
		}
		for l := level + 1; l <= prev; l++ {
			g.since[l] = time.Time{}
		}
		g.level = level
		g.changes++
	}
	g.mu.Unlock()
	if level != prev {
		if level > prev {
			g.log.Warn("memory_shedding", "level", level.String(), "from", prev.String(), "usage", FormatBytes(u.Total()),
				"budget", FormatBytes(g.cfg.Budget), "go", FormatBytes(u.Go), "bpf_maps", FormatBytes(u.BPFMaps), "cgroup_events", u.Events)
		} else {
			g.log.Info("memory_restored", "level", level.String(), "from", prev.String(), "usage", FormatBytes(u.Total()), "budget", FormatBytes(g.cfg.Budget))
		}
		if g.cfg.Apply != nil {
			g.cfg.Apply(level)
		}
	}
	return level
}

// Run measures with read every interval until ctx ends.
func (g *Governor) Run(ctx context.Context, every time.Duration, read func() Usage) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		g.Observe(time.Now(), read())
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// State is what a Governor reports.
type State struct {
	Budget uint64
	Level  Level
	// Since holds, for each level now shed, when it began (zero for the
	// others), indexed by Level.
	Since [Top + 1]time.Time
	// Last is the last measurement, taken at LastAt.
	Last    Usage
	LastAt  time.Time
	Changes uint64
}

// State returns the current state.
func (g *Governor) State() State {
	g.mu.Lock()
	defer g.mu.Unlock()
	return State{Budget: g.cfg.Budget, Level: g.level, Since: g.since, Last: g.last, LastAt: g.lastAt, Changes: g.changes}
}

// Level returns the current level.
func (g *Governor) Level() Level {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.level
}
