package srcspec

import (
	"fmt"
	"strings"
)

// A Label names a series label and the operand its value comes from.
type Label struct {
	Name        string
	Operand     int
	OperandName string // as written ("arg2", "status")
}

// Labels are a source's labels and the cap on their distinct values.
type Labels struct {
	List []Label
	// Cap is how many distinct values each label admits (the first
	// ones seen); later values are keyed "other". DefaultLabelCap when 0.
	Cap int
}

// Label caps.
const (
	DefaultLabelCap = 100
	MaxLabelCap     = 10000
)

// CapOrDefault returns the cap in effect.
func (l Labels) CapOrDefault() int {
	if l.Cap == 0 {
		return DefaultLabelCap
	}
	return l.Cap
}

// Names returns the labels' names in order.
func (l Labels) Names() []string {
	out := make([]string, len(l.List))
	for i, x := range l.List {
		out[i] = x.Name
	}
	return out
}

// Encode returns the labels as bpf/source.h's struct src_labels, under the
// label set id the collector gave the source (0 when it has no labels).
func (l Labels) Encode(labelset uint16) LabelSpec {
	var s LabelSpec
	if len(l.List) == 0 {
		return s
	}
	s.Labelset = labelset
	s.Count = uint8(len(l.List))
	for i, x := range l.List {
		if i < MaxLabels {
			s.Operand[i] = uint8(x.Operand)
		}
	}
	s.Cap = uint32(l.CapOrDefault())
	return s
}

// reservedLabels are the labels every series already has (snapshot
// Series.Labels), or that Prometheus and alerts give a meaning.
var reservedLabels = map[string]string{
	"span":      "the span name",
	"cgroup":    "the series' cgroup",
	"cgroup_id": "the series' cgroup",
	"container": "the series' container",
	"pod":       "the series' pod",
	"unit":      "the series' systemd unit",
	"process":   "the series' process",
	"alertname": "alerts",
	"le":        "Prometheus histograms",
	"quantile":  "Prometheus summaries",
	"kind":      "the series kind",
}

// CheckLabelName reports whether name may be a source's label: a
// Prometheus label name ([a-zA-Z_][a-zA-Z0-9_]*, not starting with __)
// that no series already has.
func CheckLabelName(name string) error {
	if name == "" {
		return fmt.Errorf("empty label name")
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if !(c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || i > 0 && c >= '0' && c <= '9') {
			return fmt.Errorf("label name %q: want letters, digits and _, not starting with a digit", name)
		}
	}
	if strings.HasPrefix(name, "__") {
		return fmt.Errorf("label name %q: names starting with __ are reserved by Prometheus", name)
	}
	if what, ok := reservedLabels[name]; ok {
		return fmt.Errorf("label name %q is taken by %s: choose another", name, what)
	}
	return nil
}
