package deploy

import (
	"encoding/json"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"
)

// An alertClause is one comparison of an alert's condition: the quantity
// it compares (PromQL) with a number.
type alertClause struct {
	quantity  string
	op        string
	threshold float64
}

// splitTop splits expr at each top-level (outside parentheses, braces,
// brackets and quotes) occurrence of sep.
func splitTop(expr, sep string) []string {
	var out []string
	depth, start := 0, 0
	var quote byte
	for i := 0; i < len(expr); i++ {
		c := expr[i]
		switch {
		case quote != 0:
			if c == '\\' {
				i++
			} else if c == quote {
				quote = 0
			}
		case c == '"' || c == '\'' || c == '`':
			quote = c
		case c == '(' || c == '{' || c == '[':
			depth++
		case c == ')' || c == '}' || c == ']':
			depth--
		case depth == 0 && strings.HasPrefix(expr[i:], sep):
			out = append(out, expr[start:i])
			start = i + len(sep)
			i += len(sep) - 1
		}
	}
	return append(out, expr[start:])
}

var spaces = regexp.MustCompile(`\s+`)

// normalize drops the spaces PromQL ignores.
func normalize(expr string) string {
	s := strings.TrimSpace(spaces.ReplaceAllString(expr, " "))
	for _, p := range []string{"( ", " )", "{ ", " }", ", "} {
		s = strings.ReplaceAll(s, p, strings.TrimSpace(p))
	}
	return s
}

// clauses splits an alert's condition into its comparisons: the
// conditions joined by and, each QUANTITY OP NUMBER.
func clauses(t *testing.T, alert, expr string) []alertClause {
	t.Helper()
	var out []alertClause
	for _, c := range splitTop(expr, " and ") {
		found := false
		for _, op := range []string{">=", "<=", "==", "!=", ">", "<"} {
			parts := splitTop(c, " "+op+" ")
			if len(parts) != 2 {
				continue
			}
			v, err := strconv.ParseFloat(strings.TrimSpace(parts[1]), 64)
			if err != nil {
				t.Fatalf("alert %s: %q: the right of %s is not a number", alert, c, op)
			}
			out = append(out, alertClause{normalize(parts[0]), op, v})
			found = true
			break
		}
		if !found {
			t.Fatalf("alert %s: %q is not QUANTITY OP NUMBER", alert, c)
		}
	}
	return out
}

// dashboardMatcher is a label matcher on one of the dashboard's variables
// ($namespace, $instance), which a panel adds to the alert's selectors.
var dashboardMatcher = regexp.MustCompile(`,?\s*[a-zA-Z_][a-zA-Z0-9_]*\s*=~\s*"\$[a-z_]+"\s*`)

// panelQuantity is a panel's query without the dashboard's variable
// matchers: the quantity an alert computes, if the panel shows it.
func panelQuantity(expr string) string {
	s := dashboardMatcher.ReplaceAllString(expr, "")
	s = strings.ReplaceAll(s, "{,", "{")
	s = strings.ReplaceAll(s, "{}", "")
	return normalize(s)
}

// TestDashboardShowsAlertConditions checks that every comparison of every
// shipped alert (deploy/prometheus) has a dashboard panel whose query is
// the quantity it compares, the alert's own selectors, ranges and
// aggregations, narrowed only by the dashboard's variables, and, for an
// ordering comparison, the alert's threshold drawn on the panel as a
// threshold step shown as a line or an area.
func TestDashboardShowsAlertConditions(t *testing.T) {
	b, err := os.ReadFile(rulesPath)
	if err != nil {
		t.Fatal(err)
	}
	var f struct {
		Groups []struct {
			Rules []struct {
				Alert string `yaml:"alert"`
				Expr  string `yaml:"expr"`
			} `yaml:"rules"`
		} `yaml:"groups"`
	}
	if err := yaml.Unmarshal(b, &f); err != nil {
		t.Fatal(err)
	}
	db, err := os.ReadFile(dashboardPath)
	if err != nil {
		t.Fatal(err)
	}
	var d struct {
		Panels []struct {
			Title       string `json:"title"`
			FieldConfig struct {
				Defaults struct {
					Thresholds struct {
						Steps []struct {
							Value *float64 `json:"value"`
						} `json:"steps"`
					} `json:"thresholds"`
					Custom struct {
						ThresholdsStyle struct {
							Mode string `json:"mode"`
						} `json:"thresholdsStyle"`
					} `json:"custom"`
				} `json:"defaults"`
			} `json:"fieldConfig"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal(db, &d); err != nil {
		t.Fatalf("%s: %v", dashboardPath, err)
	}
	n := 0
	for _, g := range f.Groups {
		for _, r := range g.Rules {
			if r.Alert == "" {
				continue
			}
			n++
			for _, c := range clauses(t, r.Alert, r.Expr) {
				shown, drawn := "", false
				for _, p := range d.Panels {
					for _, tg := range p.Targets {
						if panelQuantity(tg.Expr) != c.quantity {
							continue
						}
						shown = p.Title
						if c.op == "==" || c.op == "!=" {
							drawn = true
						}
						style := p.FieldConfig.Defaults.Custom.ThresholdsStyle.Mode
						for _, s := range p.FieldConfig.Defaults.Thresholds.Steps {
							if s.Value != nil && *s.Value == c.threshold && style != "" && style != "off" {
								drawn = true
							}
						}
					}
					if drawn {
						break
					}
				}
				switch {
				case shown == "":
					t.Errorf("alert %s: no panel shows %s (the quantity of %s %s %v)", r.Alert, c.quantity, c.quantity, c.op, c.threshold)
				case !drawn:
					t.Errorf("alert %s: panel %q shows %s but does not draw the threshold %v (a threshold step shown as a line)", r.Alert, shown, c.quantity, c.threshold)
				}
			}
		}
	}
	if n == 0 {
		t.Fatalf("%s: no alerts", rulesPath)
	}
}

// TestAlertClauses checks the parsing the dashboard test relies on, on
// the shapes the shipped alerts have.
func TestAlertClauses(t *testing.T) {
	got := clauses(t, "x", "a:b{x=\"a and b > 2\"} > 1 and sum by (y) (rate(c[5m])) >= 0.5")
	if len(got) != 2 || got[0] != (alertClause{`a:b{x="a and b > 2"}`, ">", 1}) || got[1] != (alertClause{"sum by (y) (rate(c[5m]))", ">=", 0.5}) {
		t.Errorf("clauses: %+v", got)
	}
	if q := panelQuantity(`up{job=~".*spanwatch.*", instance=~"$instance"}`); q != `up{job=~".*spanwatch.*"}` {
		t.Errorf("panelQuantity: %s", q)
	}
	if q := panelQuantity(`max by (a) (m{instance=~"$instance", namespace=~"$namespace"})`); q != `max by (a) (m)` {
		t.Errorf("panelQuantity: %s", q)
	}
}
