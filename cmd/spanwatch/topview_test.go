package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/spanwatch/spanwatch/snapshot"
)

func topSnapshot() *snapshot.Snapshot {
	return &snapshot.Snapshot{WindowNs: 1e9, Series: []snapshot.Series{
		{Span: "checkout", Identity: snapshot.Identity{Namespace: "shop", Pod: "web-0", Container: "server", Process: "web"}, Count: 100, Rate: 100, Errors: 5, ErrorRatio: 0.05, P50Ns: 2e6, P90Ns: 8e6, P99Ns: 30e6, MaxNs: 50e6},
		{Span: "search", Identity: snapshot.Identity{Namespace: "shop", Pod: "web-0", Container: "server", Process: "web"}, Count: 500, Rate: 500, P50Ns: 1e6, P90Ns: 2e6, P99Ns: 4e6, MaxNs: 9e6, OverBudget: 2},
		{Span: "render", Identity: snapshot.Identity{Unit: "front.service", Process: "front"}, Count: 50, Rate: 50, ErrorRatio: 0.2, P50Ns: 9e6, P90Ns: 20e6, P99Ns: 90e6, MaxNs: 95e6},
		{Span: "db.query", Identity: snapshot.Identity{Cgroup: "/user.slice/session-3.scope"}, Count: 10, Rate: 10, P99Ns: 1e9, MaxNs: 2e9},
		{Span: "idle", Count: 0}, // empty windows are not shown
	}}
}

// spans renders the table and returns its span column, in order.
func spans(t *testing.T, s *snapshot.Snapshot, v tableView) string {
	t.Helper()
	var b bytes.Buffer
	renderTableView(&b, s, v)
	var out []string
	for _, l := range strings.Split(b.String(), "\n")[1:] {
		f := strings.Fields(l)
		if len(f) > 8 && !strings.HasPrefix(l, "…") && !strings.Contains(l, " series, ") {
			out = append(out, f[0])
		}
	}
	return strings.Join(out, " ")
}

func TestTopSortAndFilter(t *testing.T) {
	s := topSnapshot()
	for _, tc := range []struct {
		name   string
		sort   sortKey
		rev    bool
		filter string
		limit  int
		want   string
	}{
		{"default: rate", "", false, "", 0, "search checkout render db.query"},
		{"p99", sortP99, false, "", 0, "db.query render checkout search"},
		{"errors", sortErrors, false, "", 0, "render checkout db.query search"},
		{"over budget", sortOver, false, "", 0, "search checkout db.query render"},
		{"span name", sortSpan, false, "", 0, "checkout db.query render search"},
		{"span name reversed", sortSpan, true, "", 0, "search render db.query checkout"},
		{"process (none last reversed)", sortProcess, false, "", 0, "db.query render checkout search"},
		{"filter a span glob", "", false, "s*", 0, "search"},
		{"filter labels", sortP99, false, "namespace=shop,process=web", 0, "checkout search"},
		{"filter negated", "", false, "process=!web", 0, "render db.query"},
		{"filter cgroup glob across /", "", false, "cgroup=/user.slice/*", 0, "db.query"},
		{"limit", "", false, "", 2, "search checkout"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f, err := parseFilter(tc.filter)
			if err != nil {
				t.Fatal(err)
			}
			if got := spans(t, s, tableView{sort: tc.sort, reverse: tc.rev, filter: f, limit: tc.limit}); got != tc.want {
				t.Errorf("spans %q, want %q", got, tc.want)
			}
		})
	}
	for _, bad := range []string{"color=red", `span=a\`} {
		if _, err := parseFilter(bad); err == nil {
			t.Errorf("parseFilter(%q) succeeded", bad)
		}
	}
	if _, err := parseSortKey("cpu"); err == nil || !strings.Contains(err.Error(), "p99") {
		t.Errorf("parseSortKey(cpu) = %v", err)
	}
}

func TestTopTableColumns(t *testing.T) {
	var b bytes.Buffer
	renderTableView(&b, topSnapshot(), tableView{})
	out := b.String()
	for _, want := range []string{"PROCESS", "shop/web-0/server", "front.service", "/user.slice/session-3.scope", " web ", " front "} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}
}

// TestTopKeys presses keys the way a user at the terminal would.
func TestTopKeys(t *testing.T) {
	var k topKeys
	press := func(keys string) (redraw, quit bool) {
		for i := 0; i < len(keys); i++ {
			redraw, quit = k.key(keys[i])
		}
		return
	}
	press("p")
	if k.view.sort != sortP99 {
		t.Errorf("after p: sort %q", k.view.sort)
	}
	press("R")
	if !k.view.reverse {
		t.Error("R did not reverse")
	}
	press("/process=web\r")
	if k.view.filter.String() != "process=web" || k.editing {
		t.Errorf("after typing a filter: %q editing %v", k.view.filter, k.editing)
	}
	if got := spans(t, topSnapshot(), k.view); got != "search checkout" {
		t.Errorf("p99 reversed, process=web: %q", got)
	}
	press("/" + strings.Repeat("\x7f", 20) + "color=red\r") // a bad label
	if k.err == "" || k.view.filter.String() != "process=web" {
		t.Errorf("a bad filter: err %q, filter %q (want the old one kept)", k.err, k.view.filter)
	}
	press("/foo\x1b") // Escape keeps the filter
	if k.view.filter.String() != "process=web" || k.editing {
		t.Errorf("after Escape: %q", k.view.filter)
	}
	press("/" + strings.Repeat("\x7f", 20) + "\r") // clear it
	if k.view.filter != nil {
		t.Errorf("empty filter: %v", k.view.filter)
	}
	if !strings.Contains(k.status(), "sorted by p99 (reversed)") {
		t.Errorf("status %q", k.status())
	}
	if redraw, _ := press("x"); redraw {
		t.Error("an unknown key redraws")
	}
	if _, quit := press("q"); !quit {
		t.Error("q does not quit")
	}
}
