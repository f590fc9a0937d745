package metrics

import (
	"strings"
	"testing"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/spanwatch/spanwatch/config/section"
)

// ParseConfig decodes a metrics: section alone, as package config does.
func ParseConfig(file string, n *yaml.Node) (Config, error) {
	d := section.NewDecoder(file, nil)
	cfg := Decode(d, n)
	return cfg, d.Err()
}

func sectionNode(t *testing.T, src string) *yaml.Node {
	t.Helper()
	var doc yaml.Node
	if err := yaml.Unmarshal([]byte(src), &doc); err != nil {
		t.Fatal(err)
	}
	root := doc.Content[0]
	for i := 0; i+1 < len(root.Content); i += 2 {
		if root.Content[i].Value == "metrics" {
			return root.Content[i+1]
		}
	}
	return &yaml.Node{}
}

func TestParseConfig(t *testing.T) {
	for _, tc := range []struct {
		name string
		src  string
		want Config
	}{
		{"absent", "rules: []\n", Config{}},
		{"all", "metrics:\n  buckets: [1ms, 5ms, 250ms, 1s, 1m]\n  native_histograms: false\n  exemplars: false\n  series_ttl: 1d\n",
			Config{Bounds: []time.Duration{time.Millisecond, 5 * time.Millisecond, 250 * time.Millisecond, time.Second, time.Minute}, NoNativeHistograms: true, NoExemplars: true, SeriesTTL: 24 * time.Hour}},
		{"exemplars on", "metrics:\n  exemplars: true\n", Config{}},
		{"no classic buckets", "metrics:\n  buckets: []\n", Config{Bounds: []time.Duration{}}},
		{"keep forever", "metrics:\n  series_ttl: 0\n", Config{SeriesTTL: -1}},
		{"spanmetrics names", "metrics:\n  names: spanmetrics\n", Config{Names: NamesSpanmetrics}},
		{"spanwatch names", "metrics:\n  names: spanwatch\n", Config{Names: NamesSpanwatch}},
		{"ids", "metrics:\n  ids: true\n", Config{IDs: true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseConfig("rules.yaml", sectionNode(t, tc.src))
			if err != nil {
				t.Fatal(err)
			}
			if len(got.Bounds) != len(tc.want.Bounds) || (got.Bounds == nil) != (tc.want.Bounds == nil) || got.NoNativeHistograms != tc.want.NoNativeHistograms || got.NoExemplars != tc.want.NoExemplars || got.SeriesTTL != tc.want.SeriesTTL || got.Names != tc.want.Names || got.IDs != tc.want.IDs {
				t.Fatalf("ParseConfig = %+v, want %+v", got, tc.want)
			}
			for i := range got.Bounds {
				if got.Bounds[i] != tc.want.Bounds[i] {
					t.Fatalf("bounds %v, want %v", got.Bounds, tc.want.Bounds)
				}
			}
			if _, err := NewExporter(got); err != nil {
				t.Fatalf("NewExporter(parsed config): %v", err)
			}
		})
	}
}

// TestParseConfigErrors checks that every mistake is reported at once,
// each with its file:line:col.
func TestParseConfigErrors(t *testing.T) {
	src := `metrics:
  buckets: [5ms, 1ms, 10 seconds, 0, 100ms, 100.1ms]
  native_histograms: yes please
  exemplars: 1
  series_ttl: -1h
  bucket: [1s]
  names: otel
  ids: sometimes
`
	_, err := ParseConfig("rules.yaml", sectionNode(t, src))
	if err == nil {
		t.Fatal("no error")
	}
	want := []string{
		"rules.yaml:2:18: metrics: bucket 1ms: bounds must increase",
		`rules.yaml:2:23: metrics: bucket: bad duration "10 seconds"`,
		"rules.yaml:2:35: metrics: bucket 0: bounds must be positive",
		"rules.yaml:2:45: metrics: bucket 100.1ms: within 1.09% of the one before",
		"rules.yaml:3:22: metrics: native_histograms must be true or false",
		"rules.yaml:4:14: metrics: exemplars must be true or false",
		`rules.yaml:5:15: metrics: series_ttl: negative duration "-1h"`,
		`rules.yaml:6:3: metrics: unknown key "bucket"`,
		"rules.yaml:7:10: metrics: names must be spanwatch or spanmetrics",
		"rules.yaml:8:8: metrics: ids must be true or false",
	}
	lines := strings.Split(err.Error(), "\n")
	if len(lines) != len(want) {
		t.Fatalf("%d errors, want %d:\n%v", len(lines), len(want), err)
	}
	for i, w := range want {
		if !strings.HasPrefix(lines[i], w) {
			t.Errorf("error %d = %q, want prefix %q", i, lines[i], w)
		}
	}
	if _, err := ParseConfig("rules.yaml", sectionNode(t, "metrics: [1s]\n")); err == nil || !strings.Contains(err.Error(), "rules.yaml:1:10: metrics: want a mapping") {
		t.Errorf("a list for metrics: %v", err)
	}
}
