package otlp

import (
	"slices"
	"strconv"
	"strings"
	"testing"
)

// profilesJSON is the part of a ProfilesData in OTLP/JSON (pprofile's
// JSON marshaler) the tests read. Indices of 0 are left out, as
// OTLP/JSON leaves out zero values.
type profilesJSON struct {
	ResourceProfiles []struct {
		Resource struct {
			Attributes []refAttr `json:"attributes"`
		} `json:"resource"`
		ScopeProfiles []struct {
			Scope    struct{ Name string } `json:"scope"`
			Profiles []struct {
				SampleType struct {
					TypeStrindex int `json:"typeStrindex"`
					UnitStrindex int `json:"unitStrindex"`
				} `json:"sampleType"`
				Samples []struct {
					StackIndex         int      `json:"stackIndex"`
					AttributeIndices   []int    `json:"attributeIndices"`
					LinkIndex          int      `json:"linkIndex"`
					Values             []any    `json:"values"`
					TimestampsUnixNano []string `json:"timestampsUnixNano"`
				} `json:"samples"`
				TimeUnixNano string `json:"timeUnixNano"`
				ProfileID    string `json:"profileId"`
			} `json:"profiles"`
		} `json:"scopeProfiles"`
	} `json:"resourceProfiles"`
	Dictionary struct {
		LocationTable []struct {
			Lines []struct {
				FunctionIndex int `json:"functionIndex"`
				Line          any `json:"line"`
			} `json:"lines"`
		} `json:"locationTable"`
		FunctionTable []struct {
			NameStrindex     int `json:"nameStrindex"`
			FilenameStrindex int `json:"filenameStrindex"`
		} `json:"functionTable"`
		LinkTable []struct {
			TraceID string `json:"traceId"`
			SpanID  string `json:"spanId"`
		} `json:"linkTable"`
		StringTable    []string `json:"stringTable"`
		AttributeTable []struct {
			KeyStrindex int       `json:"keyStrindex"`
			Value       otlpValue `json:"value"`
		} `json:"attributeTable"`
		StackTable []struct {
			LocationIndices []int `json:"locationIndices"`
		} `json:"stackTable"`
	} `json:"dictionary"`
}

// refAttr is a resource attribute as the Collector's pdata writes a
// profile's: its key and string value may be indices into the
// dictionary's string table (it turns the strings spanwatch sends into
// references as it decodes them).
type refAttr struct {
	Key         string `json:"key"`
	KeyStrindex int    `json:"keyStrindex"`
	Value       struct {
		otlpValue
		StringValueStrindex *int `json:"stringValueStrindex"`
	} `json:"value"`
}

func (p *profilesJSON) resource(rp int) map[string]string {
	m := map[string]string{}
	for _, a := range p.ResourceProfiles[rp].Resource.Attributes {
		k, v := a.Key, a.Value.String()
		if k == "" && a.KeyStrindex < len(p.Dictionary.StringTable) {
			k = p.Dictionary.StringTable[a.KeyStrindex]
		}
		if i := a.Value.StringValueStrindex; i != nil && *i < len(p.Dictionary.StringTable) {
			v = p.Dictionary.StringTable[*i]
		}
		m[k] = v
	}
	return m
}

func (p *profilesJSON) samples() int {
	n := 0
	for _, rp := range p.ResourceProfiles {
		for _, sp := range rp.ScopeProfiles {
			for _, pr := range sp.Profiles {
				n += len(pr.Samples)
			}
		}
	}
	return n
}

// checkProfiles checks profiles against n overruns made as
// TestOpenTelemetryCollectorProfiles makes them: even ones checkout with
// a trace, odd ones refund without, on a second stack, and one nostack.
func checkProfiles(t *testing.T, profiles []profilesJSON, n int) {
	t.Helper()
	seen := 0
	for _, p := range profiles {
		d := p.Dictionary
		str := func(i int) string {
			if i < 0 || i >= len(d.StringTable) {
				t.Fatalf("string index %d of %d", i, len(d.StringTable))
			}
			return d.StringTable[i]
		}
		if len(d.StringTable) == 0 || d.StringTable[0] != "" {
			t.Errorf("string table %q: want \"\" first", d.StringTable)
		}
		// Each function once: the zero entry, main.slowQuery,
		// main.checkout, do_sys_poll, main.refund.
		var fns []string
		for _, f := range d.FunctionTable {
			fns = append(fns, str(f.NameStrindex))
		}
		if want := []string{"", "main.slowQuery", "main.checkout", "do_sys_poll", "main.refund"}; !slices.Equal(fns, want) {
			t.Errorf("function table %q, want %q", fns, want)
		}
		// Locations: the zero entry, main.slowQuery, main.checkout,
		// do_sys_poll, and main.refund inlined into main.checkout (one
		// location, two lines).
		var lines []int
		for _, l := range d.LocationTable {
			lines = append(lines, len(l.Lines))
		}
		if len(d.StackTable) != 3 || !slices.Equal(lines, []int{0, 1, 1, 1, 2}) {
			t.Errorf("%d stacks, locations' lines %v: want 3 stacks and [0 1 1 1 2]", len(d.StackTable), lines)
		}
		for i, rp := range p.ResourceProfiles {
			if res := p.resource(i); res["service.name"] != "spanwatch" || res["host.name"] != "node1" {
				t.Errorf("resource %v", res)
			}
			for _, sp := range rp.ScopeProfiles {
				if sp.Scope.Name != "spanwatch" {
					t.Errorf("scope %q", sp.Scope.Name)
				}
				for _, pr := range sp.Profiles {
					if ty, unit := str(pr.SampleType.TypeStrindex), str(pr.SampleType.UnitStrindex); ty != SampleType || unit != SampleUnit {
						t.Errorf("sample type %s/%s", ty, unit)
					}
					if len(pr.ProfileID) != 32 {
						t.Errorf("profile id %q", pr.ProfileID)
					}
					for _, s := range pr.Samples {
						seen++
						var frames []string
						for _, l := range d.StackTable[s.StackIndex].LocationIndices {
							for _, line := range d.LocationTable[l].Lines {
								frames = append(frames, str(d.FunctionTable[line.FunctionIndex].NameStrindex))
							}
						}
						a := map[string]string{}
						for _, i := range s.AttributeIndices {
							kv := d.AttributeTable[i]
							a[str(kv.KeyStrindex)] = kv.Value.String()
						}
						var link string
						if s.LinkIndex != 0 {
							link = d.LinkTable[s.LinkIndex].TraceID + "/" + d.LinkTable[s.LinkIndex].SpanID
						}
						want := []string{"main.slowQuery", "main.checkout"}
						wantLink := "4bf92f3577b34da6a3ce929d0e0e4736/00f067aa0ba902b7"
						switch a["spanwatch.span.name"] {
						case "refund":
							want = []string{"do_sys_poll", "main.refund", "main.checkout"}
							wantLink = ""
						case "nostack":
							want = nil
							if s.StackIndex != 0 || a["spanwatch.stack_error"] != "no frames" {
								t.Errorf("sample without a stack: stack %d, attributes %v", s.StackIndex, a)
							}
						}
						if name := a["spanwatch.span.name"]; name != "checkout" && name != "refund" && name != "nostack" {
							t.Errorf("span name %q", name)
						}
						if !slices.Equal(frames, want) || link != wantLink {
							t.Errorf("sample %s: frames %q, link %q; want %q, %q", a["spanwatch.span.name"], frames, link, want, wantLink)
						}
						if a["spanwatch.duration_ns"] != "312000000" || a["process.pid"] != "1234" || a["spanwatch.label.route"] != "/pay" {
							t.Errorf("sample attributes %v", a)
						}
						if len(s.Values) != 1 || jsonFloatOrString(s.Values[0]) != "1" || len(s.TimestampsUnixNano) != 1 || !strings.HasPrefix(s.TimestampsUnixNano[0], "1700000000") {
							t.Errorf("sample values %v, timestamps %v", s.Values, s.TimestampsUnixNano)
						}
					}
				}
			}
		}
	}
	if seen != n {
		t.Errorf("%d samples, want %d", seen, n)
	}
}

func jsonFloatOrString(v any) string {
	switch v := v.(type) {
	case string:
		return v
	case float64:
		return strconv.FormatFloat(v, 'f', -1, 64)
	}
	return ""
}
