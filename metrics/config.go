package metrics

import (
	"fmt"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/spanwatch/spanwatch/config/section"
	"github.com/spanwatch/spanwatch/internal/duration"
)

// Decode decodes the metrics: section (n nil or a zero Node: the file has
// none) into a Config: the classic buckets, whether to export native
// histograms and exemplars, and the series TTL. It reports every mistake into d, each
// as "file:line:col: message"; package config calls it for the
// configuration file.
//
//	metrics:
//	  buckets: [1ms, 5ms, 25ms, 100ms, 250ms, 1s, 5s]   # classic le bounds, snapped (SnapBound)
//	  native_histograms: true                         # the default
//	  exemplars: true                                 # the default: overruns' trace ids
//	  series_ttl: 1h                                  # the default; 0 keeps every series
//	  names: spanwatch                                # the default; spanmetrics: the OTel spanmetrics connector's names
//	  ids: false                                      # the default: a Kubernetes series without cgroup path and ids
func Decode(d *section.Decoder, n *yaml.Node) Config {
	var cfg Config
	if n == nil || n.Kind == 0 {
		return cfg
	}
	n = section.Resolve(n)
	fail := func(at *yaml.Node, format string, a ...any) {
		d.Errorf(at, "metrics: %s", fmt.Sprintf(format, a...))
	}
	if n.Kind != yaml.MappingNode {
		fail(n, "want a mapping with buckets, native_histograms, exemplars, series_ttl, names, ids")
		return cfg
	}
	dur := func(v *yaml.Node, what string) (time.Duration, bool) {
		if v.Kind != yaml.ScalarNode || v.ShortTag() == "!!null" || v.ShortTag() == "!!bool" {
			fail(v, "%s must be a duration like 250ms", what)
			return 0, false
		}
		d, err := duration.Parse(v.Value)
		if err != nil {
			fail(v, "%s: %v", what, err)
			return 0, false
		}
		return d, true
	}
	seen := map[string]bool{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		if seen[k.Value] {
			fail(k, "%s given twice", k.Value)
			continue
		}
		seen[k.Value] = true
		switch k.Value {
		case "buckets":
			if v.Kind != yaml.SequenceNode {
				fail(v, "buckets must be a list of durations, e.g. [5ms, 25ms, 100ms, 1s]")
				continue
			}
			cfg.Bounds = []time.Duration{}
			for j, b := range v.Content {
				d, ok := dur(b, "bucket")
				if !ok {
					continue
				}
				if d <= 0 {
					fail(b, "bucket %s: bounds must be positive", b.Value)
					continue
				}
				if j > 0 && len(cfg.Bounds) > 0 && d <= cfg.Bounds[len(cfg.Bounds)-1] {
					fail(b, "bucket %s: bounds must increase", b.Value)
					continue
				}
				if len(cfg.Bounds) > 0 {
					if i0, _ := SnapBound(cfg.Bounds[len(cfg.Bounds)-1]); i0 == mustIndex(d) {
						fail(b, "bucket %s: within 1.09%% of the one before, both would be the same bucket boundary", b.Value)
						continue
					}
				}
				cfg.Bounds = append(cfg.Bounds, d)
			}
		case "native_histograms":
			var on bool
			if v.Kind != yaml.ScalarNode || v.ShortTag() != "!!bool" || v.Decode(&on) != nil {
				fail(v, "native_histograms must be true or false")
				continue
			}
			cfg.NoNativeHistograms = !on
		case "exemplars":
			var on bool
			if v.Kind != yaml.ScalarNode || v.ShortTag() != "!!bool" || v.Decode(&on) != nil {
				fail(v, "exemplars must be true or false")
				continue
			}
			cfg.NoExemplars = !on
		case "ids":
			var on bool
			if v.Kind != yaml.ScalarNode || v.ShortTag() != "!!bool" || v.Decode(&on) != nil {
				fail(v, "ids must be true or false")
				continue
			}
			cfg.IDs = on
		case "series_ttl":
			if d, ok := dur(v, "series_ttl"); ok {
				cfg.SeriesTTL = d
				if d == 0 {
					cfg.SeriesTTL = -1 // kept forever
				}
			}
		case "names":
			switch Names(v.Value) {
			case NamesSpanwatch, NamesSpanmetrics:
				if v.Kind == yaml.ScalarNode && v.ShortTag() == "!!str" {
					cfg.Names = Names(v.Value)
					continue
				}
			}
			fail(v, "names must be %s or %s", NamesSpanwatch, NamesSpanmetrics)
		default:
			fail(k, "unknown key %q (want one of: buckets, native_histograms, exemplars, series_ttl, names, ids)", k.Value)
		}
	}
	return cfg
}

func mustIndex(d time.Duration) int32 {
	i, _ := SnapBound(d)
	return i
}
