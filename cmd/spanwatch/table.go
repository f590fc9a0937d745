package main

import (
	"fmt"
	"io"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spanwatch/spanwatch/snapshot"
)

// renderTable writes a snapshot's series as a table, busiest first, the
// way top shows processes.
func renderTable(w io.Writer, s *snapshot.Snapshot, limit int) {
	renderTableView(w, s, tableView{limit: limit})
}

// tableView says which series a table shows and in what order.
type tableView struct {
	limit   int
	sort    sortKey // "" means rate
	reverse bool    // smallest (or, for names, last) first
	filter  *seriesFilter
}

// renderTableView writes the series view selects, sorted by its key.
func renderTableView(w io.Writer, s *snapshot.Snapshot, view tableView) {
	series := make([]snapshot.Series, 0, len(s.Series))
	for _, sr := range s.Series {
		if sr.Count > 0 && view.filter.match(&sr) {
			series = append(series, sr)
		}
	}
	key := view.sort
	if key == "" {
		key = sortRate
	}
	less := sortKeys[key].less
	sort.SliceStable(series, func(i, j int) bool {
		a, b := &series[i], &series[j]
		if view.reverse {
			a, b = b, a
		}
		if less(a, b) != less(b, a) {
			return less(a, b)
		}
		return series[i].Span < series[j].Span
	})
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "SPAN\tPROCESS\tWHERE\tRATE/s\tERR%%\tP50\tP90\tP99\tMAX\tOVER\tBUDGET\t\n")
	for i, sr := range series {
		if view.limit > 0 && i == view.limit {
			fmt.Fprintf(tw, "… %d more\t\t\t\t\t\t\t\t\t\t\t\n", len(series)-view.limit)
			break
		}
		budget := "-"
		if sr.BudgetNs > 0 {
			budget = fmtDur(sr.BudgetNs)
		}
		process := sr.Process
		if process == "" {
			process = "-"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%.1f\t%.1f\t%s\t%s\t%s\t%s\t%d\t%s\t\n",
			trunc(sr.Span, 32), trunc(process, 16), trunc(where(&sr), 40), sr.Rate, 100*sr.ErrorRatio,
			fmtDur(sr.P50Ns), fmtDur(sr.P90Ns), fmtDur(sr.P99Ns), fmtDur(sr.MaxNs), sr.OverBudget, budget)
	}
	tw.Flush()
	st := s.Stats
	fmt.Fprintf(w, "%d series, %d events in %s; drops: ringbuf %d, stats-full %d, short %d, read-errors %d\n",
		len(series), st.Events, s.Window().Round(time.Millisecond), st.RingbufDrops, st.StatsFull, st.ShortEvents, st.ReadErrors)
}

// where names the place a series runs, the way people know it: the
// Kubernetes namespace/pod/container, else the container id, the systemd
// unit, or the cgroup path.
func where(s *snapshot.Series) string {
	switch {
	case s.Pod != "":
		w := s.Namespace + "/" + s.Pod
		if s.Container != "" {
			w += "/" + s.Container
		}
		return w
	case s.ContainerID != "":
		return "ctr:" + s.ContainerID[:min(12, len(s.ContainerID))]
	case s.Unit != "":
		return s.Unit
	case s.Cgroup != "":
		return s.Cgroup
	}
	return fmt.Sprintf("cgroup:%d", s.CgroupID)
}

func trunc(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n-1] + "…"
}

func fmtDur(ns uint64) string {
	d := time.Duration(ns)
	switch {
	case d == 0:
		return "0"
	case d < time.Microsecond:
		return fmt.Sprintf("%dns", ns)
	case d < time.Millisecond:
		return fmt.Sprintf("%.1fµs", float64(ns)/1e3)
	case d < time.Second:
		return fmt.Sprintf("%.1fms", float64(ns)/1e6)
	}
	return fmt.Sprintf("%.2fs", d.Seconds())
}

// renderAlert writes one alert as a short block.
func renderAlert(w io.Writer, name, state string, labels, annotations map[string]string) {
	var ls []string
	for k, v := range labels {
		if k != "alertname" {
			ls = append(ls, k+"="+v)
		}
	}
	sort.Strings(ls)
	fmt.Fprintf(w, "ALERT %s [%s] %s\n", name, state, strings.Join(ls, " "))
	if s := annotations["summary"]; s != "" {
		fmt.Fprintf(w, "  %s\n", s)
	}
	// The stack as the detector wrote it for every notifier (the
	// hottest sampled frames, then where the span ended).
	if st := annotations["stack"]; st != "" {
		for _, line := range strings.Split(st, "\n") {
			fmt.Fprintf(w, "    %s\n", line)
		}
	}
}
