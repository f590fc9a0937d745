package policy

import (
	"fmt"
	"strings"
	"text/template"
	"time"

	"github.com/spanwatch/spanwatch/config/section"
	"github.com/spanwatch/spanwatch/snapshot"
)

// TemplateData is what a label or annotation template sees.
type TemplateData struct {
	// Labels are the alert's labels before templated labels are added:
	// the series' labels (span, cgroup, container, pod, unit, process) and
	// alertname.
	Labels map[string]string
	// Value is the value that made the rule hold, formatted for its metric
	// ("212ms", "12.5/s", "5.2%"); RawValue is the number in base units.
	Value    string
	RawValue float64
	// Threshold is the rule's threshold, formatted ("200ms"), or for an
	// anomaly rule the baseline it departed from.
	Threshold string
	Metric    string
	Rule      string
	// Series is the series the rule matched (nil for overrun alerts).
	Series *snapshot.Series
	// Overrun is the slow span (overrun alerts only).
	Overrun *snapshot.Overrun
}

// A Template is a compiled label or annotation value.
type Template struct {
	text string
	tmpl *template.Template // nil when text has no actions
	pos  section.Pos        // where the value is written (zero when compiled outside a file)
}

var templateFuncs = template.FuncMap{
	"upper": strings.ToUpper,
	"lower": strings.ToLower,
	// duration renders nanoseconds as a duration: {{ duration .Series.P99Ns }}.
	"duration": func(ns any) string {
		switch v := ns.(type) {
		case uint64:
			return formatDuration(float64(v))
		case int64:
			return formatDuration(float64(v))
		case int:
			return formatDuration(float64(v))
		case float64:
			return formatDuration(v)
		case time.Duration:
			return formatDuration(float64(v))
		}
		return fmt.Sprint(ns)
	},
}

// CompileTemplate parses a Go text/template. Missing map keys render as
// the empty string, not "<no value>".
func CompileTemplate(name, text string) (*Template, error) {
	t := &Template{text: text}
	if !strings.Contains(text, "{{") {
		return t, nil
	}
	tm, err := template.New(name).Option("missingkey=zero").Funcs(templateFuncs).Parse(text)
	if err != nil {
		return nil, fmt.Errorf("template: %s", strings.TrimPrefix(err.Error(), "template: "))
	}
	t.tmpl = tm
	return t, nil
}

// String returns the template's source.
func (t *Template) String() string { return t.text }

// Execute renders the template.
func (t *Template) Execute(data *TemplateData) (string, error) {
	if t.tmpl == nil {
		return t.text, nil
	}
	var b strings.Builder
	if err := t.tmpl.Execute(&b, data); err != nil {
		return "", err
	}
	return b.String(), nil
}

// expandAll renders every template of a map into out.
func expandAll(ts map[string]*Template, data *TemplateData, out map[string]string) error {
	for k, t := range ts {
		v, err := t.Execute(data)
		if err != nil {
			return fmt.Errorf("%s: %w", k, err)
		}
		out[k] = v
	}
	return nil
}
