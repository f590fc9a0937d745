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
	counts := make([]uint64, HistBuckets)
	counts[BucketIndex(1e6)] = 3
	return &Snapshot{
		Version: Version, Time: time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC), WindowNs: 10e9, Host: "node-1",
		Series: []Series{{
			Span: "checkout", NameID: NameID("checkout"), CgroupID: 42, Cgroup: "/system.slice/shop.service",
			Container: "abc", Pod: "uid", Unit: "shop.service", Process: "shop",
			Count: 3, Rate: 0.3, Errors: 1, ErrorRatio: 1.0 / 3, SumNs: 3e6, P50Ns: 1e6, P90Ns: 1e6, P99Ns: 1e6,
			MaxNs: 1e6, WindowMaxNs: 1e6, OverBudget: 1, BudgetNs: 5e5, Histogram: SparseBuckets(counts),
		}},
		Overruns: []Overrun{{
			Time: time.Date(2026, 12, 2, 9, 59, 59, 0, time.UTC), Span: "checkout", NameID: 1, PID: 7, TID: 8, Comm: "shop",
			CgroupID: 42, Cgroup: "/x", Container: "abc", Pod: "uid", Unit: "shop.service", DurationNs: 1e6, BudgetNs: 5e5,
			Error: true, TraceID: strings.Repeat("ab", 16), SpanID: strings.Repeat("cd", 8), StillRunning: true, Source: "marker",
			UserStack:   []Frame{{Addr: 0x401000, Function: "main.slow", File: "main.go", Line: 3, Module: "/bin/shop", Offset: 0x1000, BuildID: "ff"}},
			KernelStack: []Frame{{Addr: 0xffffffff81000000, Function: "do_nanosleep"}},
			StackError:  "short",
			Samples: []Sample{{Count: 2, WeightNs: 3e5, OffCPU: true,
				UserStack:   []Frame{{Addr: 0x401100, Function: "main.wait"}},
				KernelStack: []Frame{{Addr: 0xffffffff81000100, Function: "futex_wait"}}}},
		}},
		Stats: Stats{Events: 3, RingbufDrops: 1, StatsFull: 1, ShortEvents: 1, ReadErrors: 1, OverrunsDropped: 1, ReadNs: 100},
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
		"bad version":    func(m map[string]any) { m["version"] = 2 },
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
