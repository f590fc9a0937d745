package policy

import (
	"slices"
	"strings"
	"testing"
)

func TestLabelRefs(t *testing.T) {
	for _, tc := range []struct {
		text string
		want []string
	}{
		{"plain text", nil},
		{"{{ .Labels.pod }}/{{ .Labels.container }}", []string{"container", "pod"}},
		{`{{ index .Labels "unit" }}`, []string{"unit"}},
		{"{{ $.Labels.namespace }}", []string{"namespace"}},
		{"{{ if .Labels.pod }}{{ .Labels.pod }}{{ else }}{{ .Labels.unit }}{{ end }}", []string{"pod", "unit"}},
		// Inside with and range dot is something else: only $ counts.
		{"{{ with .Series }}{{ .Labels.x }}{{ $.Labels.y }}{{ end }}", []string{"y"}},
		{"{{ range .Overrun.UserStack }}{{ .Labels.x }}{{ end }}", nil},
		{`{{ .Labels.span | upper }} {{ printf "%s" (index $.Labels "cgroup") }}`, []string{"cgroup", "span"}},
		{`{{ define "x" }}{{ .Labels.a }}{{ end }}{{ template "x" . }}`, []string{"a"}},
	} {
		tm, err := CompileTemplate("t", tc.text)
		if err != nil {
			t.Fatal(err)
		}
		if got := tm.LabelRefs(); !slices.Equal(got, tc.want) {
			t.Errorf("%s: refs %q, want %q", tc.text, got, tc.want)
		}
	}
}

func TestLabelWarnings(t *testing.T) {
	src := `external_labels: {cluster: eu-1}
budgets:
  - span: checkout
    budget: 250ms
    labels: {team: shop}
    annotations: {summary: "{{ .Labels.node }} {{ .Labels.cluster }} {{ .Labels.team }} {{ .Labels.status }} {{ .Labels.pood }}"}
rules:
  - name: Slow
    span: checkout
    when: p99 > 200ms
    labels: {severity: page, team: "{{ .Labels.severity }}{{ .Labels.container }}"}
    annotations: {summary: "{{ .Labels.severity }} {{ .Labels.cluster }} {{ .Labels.status }}"}
`
	cfg, err := Parse("rules.yaml", []byte(src), Options{})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, w := range cfg.LabelWarnings([]string{"status"}) {
		msg := w.Error()
		got = append(got, msg[:strings.Index(msg, " (")])
	}
	want := []string{
		// The budget's annotations see node, the external labels and
		// its own labels; "pood" is a typo.
		`rules.yaml:6:28: warning: budget checkout: annotations.summary reads label "pood", which its alerts never have`,
		// A rule's label templates see the series' labels, not the
		// rule's other labels.
		`rules.yaml:11:36: warning: rule "Slow": labels.team reads label "severity", which its alerts never have`,
		// A rule's annotations see its labels but not the external ones,
		// added after them.
		`rules.yaml:12:28: warning: rule "Slow": annotations.summary reads label "cluster", which its alerts never have`,
	}
	if !slices.Equal(got, want) {
		t.Errorf("warnings:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if ws := cfg.LabelWarnings([]string{"status"}); len(ws) == 0 || !strings.HasSuffix(ws[0].Error(), "did you mean pod?") {
		t.Errorf("no hint: %v", ws)
	}
}
