package snapshot

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/santhosh-tekuri/jsonschema/v6"
)

func compileSchema(t *testing.T) *jsonschema.Schema {
	t.Helper()
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(Schema))
	if err != nil {
		t.Fatal(err)
	}
	c := jsonschema.NewCompiler()
	c.AssertFormat()
	if err := c.AddResource("snapshot.json", doc); err != nil {
		t.Fatal(err)
	}
	s, err := c.Compile("snapshot.json")
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// full is a snapshot with every field set, so the schema must describe each
// (it forbids unknown properties).
func full() *Snapshot {
	return &Snapshot{
		Version: Version, Time: time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC), WindowNs: 10e9, Host: "node-1",
		Series: []Series{{
			Span: "checkout", NameID: NameID("checkout"), CgroupID: 42, SourceLabels: map[string]string{"status": "200"}, Identity: Identity{Cgroup: "/system.slice/shop.service", Container: "abc", Pod: "uid", Unit: "shop.service", Process: "shop"},
			Count: 3, Rate: 0.3, Errors: 1, ErrorRatio: 1.0 / 3, SumNs: 3e6, P50Ns: 1e6, P90Ns: 1e6, P99Ns: 1e6,
			MinNs: 1e6, MaxNs: 1e6, OverBudget: 1, BudgetNs: 5e5, Histogram: []Bucket{DurationBucket(1e6, 3)},
		}, {
			Kind: KindMetric, Span: "bytes", CgroupID: 42, Count: 3, Rate: 0.3, Sum: -5, Min: -7, Max: 1, P50: 1, P90: 1, P99: 1,
			Histogram: []Bucket{ValueBucketAt(ValueIndex(7), true, 1), {Zero: true, High: 1, Count: 1}, ValueBucketAt(0, false, 1)},
		}},
		Overruns: []Overrun{{
			Time: time.Date(2026, 12, 2, 9, 59, 59, 0, time.UTC), Span: "checkout", NameID: 1, PID: 7, TID: 8, Comm: "shop",
			CgroupID: 42, Identity: Identity{Cgroup: "/x", Container: "abc", Pod: "uid", Unit: "shop.service", Process: "shop"}, SourceLabels: map[string]string{"status": "503"}, DurationNs: 1e6, BudgetNs: 5e5,
			Error: true, TraceID: strings.Repeat("ab", 16), SpanID: strings.Repeat("cd", 8), StillRunning: true, Source: "marker",
			UserStack:   []Frame{{Addr: 0x401000, Function: "main.slow", File: "main.go", Line: 3, Module: "/bin/shop", Offset: 0x1000, BuildID: "ff"}},
			KernelStack: []Frame{{Addr: 0xffffffff81000000, Function: "do_nanosleep"}},
			StackError:  "short",
			Samples: []Sample{{Count: 2, WeightNs: 3e5, OffCPU: true,
				UserStack:   []Frame{{Addr: 0x401100, Function: "main.wait"}},
				KernelStack: []Frame{{Addr: 0xffffffff81000100, Function: "futex_wait"}}}},
		}},
		Stats: Stats{Events: 3, RingbufDrops: 1, StatsFull: 1, ShortEvents: 1, ReadErrors: 1, OverrunsDropped: 1, ReadNs: 100,
			HistogramFull: 1, NamesTruncated: 1, QuotaOther: 1, NamesFull: 1, ExtremesDropped: 1, RecursionMisses: 1, SeriesLive: 2, SeriesCapacity: 131072, BPFMapBytes: 1 << 27,
			Sources: []SourceHealth{{Source: "usdt", Name: "query", Declared: "r.yaml:3:7", Sites: 2, Hits: 40},
				{Source: "usdt", Name: "hotspot:method__entry arg1", Sites: 2, Silent: true, Hint: "-XX:+ExtendedDTraceProbes"}}},
	}
}

func TestSchemaValidatesSnapshots(t *testing.T) {
	schema := compileSchema(t)
	for name, s := range map[string]*Snapshot{
		"full":  full(),
		"empty": {Version: Version, Time: time.Unix(0, 0).UTC(), Series: []Series{}},
	} {
		var buf bytes.Buffer
		if err := s.Encode(&buf); err != nil {
			t.Fatal(err)
		}
		v, err := jsonschema.UnmarshalJSON(&buf)
		if err != nil {
			t.Fatal(err)
		}
		if err := schema.Validate(v); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
}

func TestSchemaRejects(t *testing.T) {
	schema := compileSchema(t)
	for name, mutate := range map[string]func(m map[string]any){
		"unknown field":  func(m map[string]any) { m["surprise"] = 1 },
		"bad version":    func(m map[string]any) { m["version"] = 3 },
		"bad kind":       func(m map[string]any) { m["series"].([]any)[0].(map[string]any)["kind"] = "gauge" },
		"negative count": func(m map[string]any) { m["series"].([]any)[0].(map[string]any)["count"] = -1 },
		"bad trace id":   func(m map[string]any) { m["overruns"].([]any)[0].(map[string]any)["trace_id"] = "xyz" },
		"missing stats":  func(m map[string]any) { delete(m, "stats") },
	} {
		b, _ := json.Marshal(full())
		var m map[string]any
		json.Unmarshal(b, &m)
		mutate(m)
		if err := schema.Validate(m); err == nil {
			t.Errorf("%s: schema accepted it", name)
		}
	}
}

func TestEncodeDecodeRoundTrip(t *testing.T) {
	var buf bytes.Buffer
	want := full()
	if err := want.Encode(&buf); err != nil {
		t.Fatal(err)
	}
	got, err := Decode(&buf)
	if err != nil {
		t.Fatal(err)
	}
	a, _ := json.Marshal(want)
	b, _ := json.Marshal(got)
	if !bytes.Equal(a, b) {
		t.Fatalf("round trip changed the snapshot:\n%s\n%s", a, b)
	}
	if _, err := Decode(strings.NewReader(`{"version": 9}`)); err == nil {
		t.Fatal("Decode accepted version 9")
	}
}

// TestDecodeV1 reads a version 1 snapshot as recorded before the schema-6
// histograms: counts and quantiles carry over, the window's maximum
// becomes max_ns, and each log-linear bucket lands in the schema-6 bucket
// of its midpoint.
func TestDecodeV1(t *testing.T) {
	const v1 = `{"version": 1, "time": "2026-12-02T10:00:00Z", "window_ns": 10000000000, "series": [
	  {"span": "checkout", "cgroup_id": 42, "count": 3, "rate": 0.3, "errors": 1, "error_ratio": 0.3333,
	   "sum_ns": 3000000, "p50_ns": 1000000, "p90_ns": 1000000, "p99_ns": 1000000, "max_ns": 9000000,
	   "window_max_ns": 1048575, "over_budget": 0,
	   "histogram": [{"low_ns": 983040, "high_ns": 1048576, "count": 3}]}],
	  "stats": {"events": 3, "ringbuf_drops": 0, "stats_full": 0, "short_events": 0, "read_errors": 0, "overruns_dropped": 0, "read_ns": 1}}`
	s, err := Decode(strings.NewReader(v1))
	if err != nil {
		t.Fatal(err)
	}
	sr := s.Series[0]
	if s.Version != Version || sr.Count != 3 || sr.P99Ns != 1e6 || sr.MaxNs != 1048575 || sr.MinNs != 0 {
		t.Fatalf("converted series %+v", sr)
	}
	mid := uint64(1015689) // sqrt(983040 * 1048575)
	if len(sr.Histogram) != 1 || sr.Histogram[0].Count != 3 || sr.Histogram[0].Index != DurationIndex(mid) {
		t.Fatalf("converted histogram %+v, want bucket %d", sr.Histogram, DurationIndex(mid))
	}
	if _, err := Decode(strings.NewReader(`{"version": 1, "time": "2026-12-02T10:00:00Z", "window_ns": 1, "series": [], "stats": {}, "surprise": 1}`)); err == nil {
		t.Fatal("a version 1 snapshot with an unknown field was accepted")
	}
}
