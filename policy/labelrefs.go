package policy

import (
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"
	"text/template/parse"

	"github.com/spanwatch/spanwatch/config/section"
	"github.com/spanwatch/spanwatch/internal/typo"
)

// LabelRefs returns the label names the template reads from the alert's
// labels, sorted: {{ .Labels.pod }}, {{ $.Labels.pod }} and
// {{ index .Labels "pod" }}. Inside with and range, where dot is something
// else, only the $-rooted forms count.
func (t *Template) LabelRefs() []string {
	if t == nil || t.tmpl == nil {
		return nil
	}
	refs := map[string]bool{}
	for _, tt := range t.tmpl.Templates() {
		if tt.Tree != nil && tt.Tree.Root != nil {
			labelRefs(tt.Tree.Root, true, refs)
		}
	}
	return slices.Sorted(maps.Keys(refs))
}

// labelRefs adds the labels node reads to refs; dotIsData says dot is
// the template's data (not rebound by with or range).
func labelRefs(node parse.Node, dotIsData bool, refs map[string]bool) {
	switch n := node.(type) {
	case *parse.ListNode:
		if n == nil {
			return
		}
		for _, c := range n.Nodes {
			labelRefs(c, dotIsData, refs)
		}
	case *parse.ActionNode:
		labelRefs(n.Pipe, dotIsData, refs)
	case *parse.PipeNode:
		if n == nil {
			return
		}
		for _, c := range n.Cmds {
			labelRefs(c, dotIsData, refs)
		}
	case *parse.CommandNode:
		// {{ index .Labels "pod" }}
		if len(n.Args) >= 3 {
			if id, ok := n.Args[0].(*parse.IdentifierNode); ok && id.Ident == "index" && labelsNode(n.Args[1], dotIsData) {
				if s, ok := n.Args[2].(*parse.StringNode); ok {
					refs[s.Text] = true
				}
			}
		}
		for _, a := range n.Args {
			labelRefs(a, dotIsData, refs)
		}
	case *parse.FieldNode:
		if dotIsData && len(n.Ident) >= 2 && n.Ident[0] == "Labels" {
			refs[n.Ident[1]] = true
		}
	case *parse.VariableNode:
		if len(n.Ident) >= 3 && n.Ident[0] == "$" && n.Ident[1] == "Labels" {
			refs[n.Ident[2]] = true
		}
	case *parse.ChainNode:
		labelRefs(n.Node, dotIsData, refs)
	case *parse.IfNode:
		labelRefs(n.Pipe, dotIsData, refs)
		labelRefs(n.List, dotIsData, refs)
		labelRefs(n.ElseList, dotIsData, refs)
	case *parse.WithNode:
		labelRefs(n.Pipe, dotIsData, refs)
		labelRefs(n.List, false, refs)
		labelRefs(n.ElseList, dotIsData, refs)
	case *parse.RangeNode:
		labelRefs(n.Pipe, dotIsData, refs)
		labelRefs(n.List, false, refs)
		labelRefs(n.ElseList, dotIsData, refs)
	case *parse.TemplateNode:
		labelRefs(n.Pipe, dotIsData, refs)
	}
}

// labelsNode says whether n is the labels map itself: .Labels or
// $.Labels.
func labelsNode(n parse.Node, dotIsData bool) bool {
	switch n := n.(type) {
	case *parse.FieldNode:
		return dotIsData && len(n.Ident) == 1 && n.Ident[0] == "Labels"
	case *parse.VariableNode:
		return len(n.Ident) == 2 && n.Ident[0] == "$" && n.Ident[1] == "Labels"
	}
	return false
}

// seriesLabelNames are the labels every series may carry besides its
// source's: snapshot.Series.Labels and snapshot.Identity.AddLabels.
var seriesLabelNames = []string{"span", "cgroup_id", "cgroup", "container_id", "pod_uid", "unit", "namespace", "pod", "container", "process", "service"}

// LabelWarnings finds the label and annotation templates that read a
// label no alert of theirs can have, one positioned warning each:
// sourceLabels are the label names the configuration's sources give their
// series. A rule's label templates see the series' labels and alertname;
// its annotations see its own labels too. An overrun alert's templates
// see the same; its annotations also see the external labels and node,
// which the detector adds before them. Rego policies build their own
// labels and are not checked.
func (c *Config) LabelWarnings(sourceLabels []string) []*section.Error {
	base := map[string]bool{"alertname": true}
	for _, l := range slices.Concat(seriesLabelNames, sourceLabels) {
		base[l] = true
	}
	var out []*section.Error
	check := func(owner, what string, ts map[string]*Template, known map[string]bool) {
		for _, key := range slices.Sorted(maps.Keys(ts)) {
			t := ts[key]
			for _, l := range t.LabelRefs() {
				if known[l] {
					continue
				}
				var have []string
				for k := range known {
					have = append(have, k)
				}
				sort.Strings(have)
				hint := ""
				if near := typo.Nearest(l, have, max(2, len(l)/3)); near != "" {
					hint = fmt.Sprintf("; did you mean %s?", near)
				}
				out = append(out, &section.Error{File: t.pos.File, Line: t.pos.Line, Col: t.pos.Col, Msg: fmt.Sprintf("warning: %s: %s.%s reads label %q, which its alerts never have (they can have: %s)%s",
					owner, what, key, l, strings.Join(have, ", "), hint)})
			}
		}
	}
	with := func(m map[string]bool, keys ...string) map[string]bool {
		m = maps.Clone(m)
		for _, k := range keys {
			m[k] = true
		}
		return m
	}
	for _, r := range c.Rules {
		owner := fmt.Sprintf("rule %q", r.Name)
		check(owner, "labels", r.Labels, base)
		check(owner, "annotations", r.Annotations, with(base, slices.Collect(maps.Keys(r.Labels))...))
	}
	for _, b := range c.Budgets {
		owner := fmt.Sprintf("budget %s", b.Span)
		check(owner, "labels", b.Labels, base)
		ann := with(base, slices.Collect(maps.Keys(b.Labels))...)
		ann = with(ann, slices.Collect(maps.Keys(c.ExternalLabels))...)
		if v, set := c.ExternalLabels["node"]; !set || v != "" {
			ann["node"] = true
		}
		check(owner, "annotations", b.Annotations, ann)
	}
	sort.SliceStable(out, func(i, j int) bool {
		a, b := out[i], out[j]
		if a.Line != b.Line {
			return a.Line < b.Line
		}
		return a.Col < b.Col
	})
	return out
}
