package main

import (
	"fmt"
	"sort"
	"strings"

	"github.com/spanwatch/spanwatch/internal/glob"
	"github.com/spanwatch/spanwatch/snapshot"
)

// A sortKey orders top's table.
type sortKey string

const (
	sortRate    sortKey = "rate"
	sortErrors  sortKey = "errors"
	sortP50     sortKey = "p50"
	sortP90     sortKey = "p90"
	sortP99     sortKey = "p99"
	sortMax     sortKey = "max"
	sortOver    sortKey = "over"
	sortSpan    sortKey = "span"
	sortProcess sortKey = "process"
)

// sortKeys are the orders top knows, with the key that picks each while it
// runs. Figures sort largest first, names alphabetically.
var sortKeys = map[sortKey]struct {
	key  byte
	less func(a, b *snapshot.Series) bool
}{
	sortRate:    {'r', func(a, b *snapshot.Series) bool { return a.Rate > b.Rate }},
	sortErrors:  {'e', func(a, b *snapshot.Series) bool { return a.ErrorRatio > b.ErrorRatio }},
	sortP50:     {'5', func(a, b *snapshot.Series) bool { return a.P50Ns > b.P50Ns }},
	sortP90:     {'9', func(a, b *snapshot.Series) bool { return a.P90Ns > b.P90Ns }},
	sortP99:     {'p', func(a, b *snapshot.Series) bool { return a.P99Ns > b.P99Ns }},
	sortMax:     {'m', func(a, b *snapshot.Series) bool { return a.MaxNs > b.MaxNs }},
	sortOver:    {'o', func(a, b *snapshot.Series) bool { return a.OverBudget > b.OverBudget }},
	sortSpan:    {'n', func(a, b *snapshot.Series) bool { return a.Span < b.Span }},
	sortProcess: {'c', func(a, b *snapshot.Series) bool { return a.Process < b.Process }},
}

// sortKeyNames lists the sort keys, sorted, for messages and completion.
func sortKeyNames() []string {
	var names []string
	for k := range sortKeys {
		names = append(names, string(k))
	}
	sort.Strings(names)
	return names
}

func parseSortKey(s string) (sortKey, error) {
	if _, ok := sortKeys[sortKey(s)]; !ok {
		return "", fmt.Errorf("unknown sort key %q: want one of %s", s, strings.Join(sortKeyNames(), ", "))
	}
	return sortKey(s), nil
}

// filterLabels are the labels a top filter can name.
var filterLabels = []string{"span", "namespace", "pod", "container", "process", "service", "unit", "cgroup", "container_id", "pod_uid"}

// A seriesFilter selects series: every term must match. A nil filter
// selects every series.
type seriesFilter struct {
	text  string
	terms []filterTerm
}

type filterTerm struct {
	label string
	glob  *glob.Glob
}

// parseFilter reads a filter: comma-separated terms, each LABEL=GLOB (a
// label of filterLabels) or a bare GLOB, which matches the span name.
// Globs are the rule files' (docs/syntax.md): "checkout*",
// "namespace=shop,process=!envoy". An empty filter selects everything.
func parseFilter(s string) (*seriesFilter, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return nil, nil
	}
	f := &seriesFilter{text: s}
	for _, term := range strings.Split(s, ",") {
		term = strings.TrimSpace(term)
		label, pattern, ok := strings.Cut(term, "=")
		if !ok {
			label, pattern = "span", term
		}
		label = strings.TrimSpace(label)
		found := false
		for _, l := range filterLabels {
			found = found || l == label
		}
		if !found {
			return nil, fmt.Errorf("filter %q: unknown label %q: want one of %s", s, label, strings.Join(filterLabels, ", "))
		}
		g, err := glob.Compile(strings.TrimSpace(pattern))
		if err != nil {
			return nil, fmt.Errorf("filter %q: %w", s, err)
		}
		f.terms = append(f.terms, filterTerm{label: label, glob: g})
	}
	return f, nil
}

func (f *seriesFilter) match(s *snapshot.Series) bool {
	if f == nil {
		return true
	}
	for _, t := range f.terms {
		var v string
		switch t.label {
		case "span":
			v = s.Span
		case "namespace":
			v = s.Namespace
		case "pod":
			v = s.Pod
		case "container":
			v = s.Container
		case "process":
			v = s.Process
		case "service":
			v = s.Service
		case "unit":
			v = s.Unit
		case "cgroup":
			v = s.Cgroup
		case "container_id":
			v = s.ContainerID
		case "pod_uid":
			v = s.PodUID
		}
		if !t.glob.Match(v) {
			return false
		}
	}
	return true
}

func (f *seriesFilter) String() string {
	if f == nil {
		return ""
	}
	return f.text
}

// topKeys is top's interactive state: the table's view, and a filter
// being typed after '/'.
type topKeys struct {
	view    tableView
	editing bool
	typed   []byte
	err     string // the last filter's error, shown until the next key
}

// key applies one key press; it reports whether the table should be drawn
// again, and whether to quit.
func (k *topKeys) key(b byte) (redraw, quit bool) {
	if k.editing {
		switch b {
		case '\r', '\n':
			k.editing = false
			f, err := parseFilter(string(k.typed))
			if err != nil {
				k.err = err.Error()
			} else {
				k.view.filter, k.err = f, ""
			}
		case 27: // Escape: keep the old filter
			k.editing = false
		case 127, 8: // Backspace
			if len(k.typed) > 0 {
				k.typed = k.typed[:len(k.typed)-1]
			}
		default:
			if b >= ' ' && b < 127 {
				k.typed = append(k.typed, b)
			}
		}
		return true, false
	}
	k.err = ""
	switch b {
	case 'q', 3: // q, Ctrl-C in raw mode
		return false, true
	case '/':
		k.editing, k.typed = true, []byte(k.view.filter.String())
		return true, false
	case 'R':
		k.view.reverse = !k.view.reverse
		return true, false
	}
	for name, sk := range sortKeys {
		if sk.key == b {
			k.view.sort = name
			return true, false
		}
	}
	return false, false
}

// status is the line under the table: the order, the filter, and the keys.
func (k *topKeys) status() string {
	if k.editing {
		return "filter (LABEL=GLOB,... or a span GLOB; Enter applies, Esc cancels): " + string(k.typed) + "_"
	}
	order := k.view.sort
	if order == "" {
		order = sortRate
	}
	s := "sorted by " + string(order)
	if k.view.reverse {
		s += " (reversed)"
	}
	if f := k.view.filter.String(); f != "" {
		s += ", filter " + f
	}
	s += " | keys: r rate  e errors  5 p50  9 p90  p p99  m max  o over  n span  c process  R reverse  / filter  q quit"
	if k.err != "" {
		s += "\n" + k.err
	}
	return s
}
