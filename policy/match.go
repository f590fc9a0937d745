package policy

import (
	"github.com/spanwatch/spanwatch/internal/glob"
	"github.com/spanwatch/spanwatch/snapshot"
)

// Glob is the glob syntax every section of a rule file uses (package
// internal/glob): '*' any run of characters, '?' one character, '\'
// escapes, a leading '!' negates.
type Glob = glob.Glob

// CompileGlob compiles a pattern.
func CompileGlob(pattern string) (*Glob, error) { return glob.Compile(pattern) }

// A Matcher selects series. Every non-nil glob must match; a field a series
// lacks (no container, say) is matched as the empty string.
type Matcher struct {
	Span *Glob
	// Metric selects argument metrics (series of kind "metric") by
	// name instead of spans: a matcher selects one kind or the other.
	Metric      *Glob
	Cgroup      *Glob
	ContainerID *Glob
	PodUID      *Glob
	Unit        *Glob
	Namespace   *Glob
	Pod         *Glob
	Container   *Glob
	Process     *Glob
	Service     *Glob
	// Labels match label values by name (match: in a rule): a source's
	// labels, or any of the series' other labels.
	Labels map[string]*Glob
}

// Match reports whether the series is selected.
func (m *Matcher) Match(s *snapshot.Series) bool {
	return m.MatchSpan(s.Span) && m.MatchOther(s)
}

// MatchSpan reports whether a span (or metric) name is selected. With
// MatchOther it lets an evaluator match each distinct span name once, not
// once per series.
func (m *Matcher) MatchSpan(span string) bool {
	if m.Metric != nil {
		return m.Metric.Match(span)
	}
	return globOK(m.Span, span)
}

// MatchOther reports whether the series' fields other than the span name
// are selected: its kind, cgroup, container, pod, unit, process, service
// and labels.
func (m *Matcher) MatchOther(s *snapshot.Series) bool {
	return (m.Metric != nil) == s.IsMetric() &&
		globOK(m.Cgroup, s.Cgroup) && globOK(m.ContainerID, s.ContainerID) &&
		globOK(m.PodUID, s.PodUID) && globOK(m.Unit, s.Unit) && globOK(m.Namespace, s.Namespace) &&
		globOK(m.Pod, s.Pod) && globOK(m.Container, s.Container) && globOK(m.Process, s.Process) &&
		globOK(m.Service, s.Service) && m.matchLabels(s)
}

// SpanOnly reports whether the matcher selects by span name alone:
// MatchOther then asks only that a series is not a metric.
func (m *Matcher) SpanOnly() bool {
	return m.Metric == nil && m.Cgroup == nil && m.ContainerID == nil && m.PodUID == nil &&
		m.Unit == nil && m.Namespace == nil && m.Pod == nil && m.Container == nil &&
		m.Process == nil && m.Service == nil && len(m.Labels) == 0
}

func globOK(g *Glob, s string) bool { return g == nil || g.Match(s) }
