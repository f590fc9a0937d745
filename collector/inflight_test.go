//go:build linux

package collector

import (
	"bytes"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"
)

// Budgets with sample_from_start where the samplers are unavailable (the
// compat objects here) are reported with the reason, not ignored; without
// such budgets nothing is said.
func TestSampleFromStartUnavailable(t *testing.T) {
	for _, tc := range []struct {
		rules []BudgetRule
		want  string
	}{
		{[]BudgetRule{{Span: "charge", Budget: 100 * time.Millisecond, SampleFromStart: true}}, "sample_from_start_unavailable"},
		{[]BudgetRule{{Span: "charge", Budget: 100 * time.Millisecond}}, ""},
	} {
		var buf bytes.Buffer
		c := &Collector{log: slog.New(slog.NewTextHandler(&buf, nil)), inflightErr: errors.New("the compat objects have no samplers")}
		tbl, errs := compileBudgets(tc.rules)
		if len(errs) != 0 {
			t.Fatal(errs)
		}
		c.applyEarly(nil, tbl)
		got := buf.String()
		if tc.want == "" && got != "" || tc.want != "" && (!strings.Contains(got, tc.want) || !strings.Contains(got, "compat objects")) {
			t.Errorf("%+v: logged %q, want %q", tc.rules, got, tc.want)
		}
	}
}

func TestCouldExtend(t *testing.T) {
	for _, tc := range []struct {
		pattern, name string
		want          bool
	}{
		{"GET /orders/*", "GET", true},
		{"GET /orders/{id}", "GET", true}, // an exact name extending GET
		{"GET*", "GET", true},
		{"G*", "GET", true},
		{"*", "GET", true},
		{"GET", "GET", false}, // the same name: no extension
		{"GETTER *", "GET", false},
		{"POST /orders/*", "GET", false},
		{"db.query", "db", false},
		{"!GET*", "GET", false}, // negated: not taken
		{"GE? /x", "GET", true},
	} {
		if got := couldExtend(tc.pattern, tc.name); got != tc.want {
			t.Errorf("couldExtend(%q, %q) = %v, want %v", tc.pattern, tc.name, got, tc.want)
		}
	}
}
