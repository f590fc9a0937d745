package config

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/spanwatch/spanwatch/config/section"
	"github.com/spanwatch/spanwatch/internal/glob"
	"github.com/spanwatch/spanwatch/internal/tpsource"
	"github.com/spanwatch/spanwatch/internal/usdt"
	"github.com/spanwatch/spanwatch/metrics"
	"github.com/spanwatch/spanwatch/notify"
	"github.com/spanwatch/spanwatch/source/function"
)

// want is one expected problem: "# want POS | TEXT" at the end of a broken
// file, POS being LINE, LINE:COL, or FILE:LINE[:COL] for a file it names.
type want struct {
	prefix string // "file:line:col: " or "file:line:" (any column)
	text   string
}

func readWants(t *testing.T, path string) []want {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var out []want
	for _, line := range strings.Split(string(data), "\n") {
		rest, ok := strings.CutPrefix(line, "# want ")
		if !ok {
			continue
		}
		pos, text, ok := strings.Cut(rest, " | ")
		if !ok {
			t.Fatalf("%s: bad want line %q", path, line)
		}
		file := path
		parts := strings.Split(pos, ":")
		if _, err := strconv.Atoi(parts[0]); err != nil {
			file = filepath.Join(filepath.Dir(path), parts[0])
			parts = parts[1:]
		}
		prefix := file + ":" + strings.Join(parts, ":") + ":"
		if len(parts) == 2 {
			prefix += " "
		}
		out = append(out, want{prefix: prefix, text: text})
	}
	if len(out) == 0 {
		t.Fatalf("%s: no # want lines", path)
	}
	return out
}

// TestBrokenFiles loads each broken file of testdata/broken: every one
// fails, with exactly the problems its "# want" lines list, in order, each
// at its file:line:col, all in one pass (every_section.yaml has mistakes
// in every section at once). check and run both report what Load does
// (cmd/spanwatch's TestCheckEqualsRun shows the two agree).
func TestBrokenFiles(t *testing.T) {
	files, err := filepath.Glob("testdata/broken/*.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if len(files) < 40 {
		t.Fatalf("only %d broken files", len(files))
	}
	for _, f := range files {
		t.Run(strings.TrimSuffix(filepath.Base(f), ".yaml"), func(t *testing.T) {
			wants := readWants(t, f)
			cfg, err := Load(f, LoadOptions{})
			if err == nil {
				t.Fatalf("loaded: %+v", cfg)
			}
			var list ErrorList
			if !errors.As(err, &list) {
				t.Fatalf("error is %T, not an ErrorList: %v", err, err)
			}
			for i := 0; i < max(len(list), len(wants)); i++ {
				switch {
				case i >= len(list):
					t.Errorf("missing problem %s%s", wants[i].prefix, wants[i].text)
				case i >= len(wants):
					t.Errorf("unexpected problem %v", list[i])
				default:
					got := list[i].Error()
					if !strings.HasPrefix(got, wants[i].prefix) || !strings.Contains(got, wants[i].text) {
						t.Errorf("problem %d = %q\nwant %s...%s", i, got, wants[i].prefix, wants[i].text)
					}
				}
			}
		})
	}
}

func TestGoodFile(t *testing.T) {
	cfg, err := Load("testdata/good/full.yaml", LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	wantCollector := CollectorSettings{
		Interval: 2 * time.Second, Sources: []string{"marker"}, Binaries: []string{"/bin/sh"}, MaxSeries: 4096,
		RingbufBytes: 1 << 20, ForceKprobe: true, ScanInterval: -time.Second,
	}
	if !reflect.DeepEqual(cfg.Collector, wantCollector) {
		t.Errorf("collector = %+v\nwant %+v", cfg.Collector, wantCollector)
	}
	if cfg.Path != "testdata/good/full.yaml" || len(cfg.Rules.Rules) != 1 || len(cfg.Rules.Policies) != 1 {
		t.Errorf("path %q, %d rules, %d policies", cfg.Path, len(cfg.Rules.Rules), len(cfg.Rules.Policies))
	}
	if cfg.Notify == nil || len(cfg.Notify.Webhooks) != 1 || cfg.Notify.Routing.Outbox.MaxEntries != 500 {
		t.Fatalf("notify = %+v", cfg.Notify)
	}
	if len(cfg.Sources) != 1 || cfg.Sources[0].Span != "request" {
		t.Errorf("sources = %+v", cfg.Sources)
	}
	if f := cfg.Functions; len(f) != 1 || f[0].Process == nil || f[0].Process.String() != "prometheus*" || f[0].Binary != "" || f[0].Span != "promql_exec" {
		t.Errorf("functions = %+v, want one process: target prometheus*", f)
	}
	if cfg.ExternalURL != "https://node1.example:9464/spanwatch/" {
		t.Errorf("external URL = %q", cfg.ExternalURL)
	}
	wantMetrics := metrics.Config{Bounds: []time.Duration{time.Millisecond, 10 * time.Millisecond, 100 * time.Millisecond, time.Second, 10 * time.Second}, SeriesTTL: 24 * time.Hour}
	if !reflect.DeepEqual(cfg.Metrics, wantMetrics) {
		t.Errorf("metrics = %+v\nwant %+v", cfg.Metrics, wantMetrics)
	}
	wantListener := ListenerSettings{WebConfigFile: filepath.Join("testdata", "good", "web.yml"), MaxInFlight: 4, WriteTimeout: time.Minute, KernelAddresses: true}
	if cfg.Listener != wantListener {
		t.Errorf("listener = %+v\nwant %+v", cfg.Listener, wantListener)
	}
	// The payload's externalURL follows the agent's unless routing: sets
	// its own.
	if got := cfg.Notify.Routing.ExternalURL; got != cfg.ExternalURL {
		t.Errorf("payload externalURL = %q", got)
	}

	// Without webhooks, no notifier config (and no outbox to check).
	min, err := Load("testdata/good/minimal.yaml", LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if min.Listener != (ListenerSettings{MaxInFlight: DefaultMaxInFlight, WriteTimeout: DefaultWriteTimeout}) {
		t.Errorf("minimal: listener %+v", min.Listener)
	}
	if min.Notify != nil || min.Collector.Interval != DefaultInterval || min.ExternalURL != "" {
		t.Errorf("minimal: notify %v, interval %s, external URL %q", min.Notify, min.Collector.Interval, min.ExternalURL)
	}
}

// TestCommandLine checks the command line's values: they win over the
// file's for the keys they set, they are validated by the file's rules,
// and their problems are named by flag after the file's.
func TestCommandLine(t *testing.T) {
	file := []byte("collector:\n  interval: 2s\n  max_series: 500\nexternal_url: http://file.example:9464\n")
	for _, tc := range []struct {
		name   string
		opts   LoadOptions
		check  func(*Config) string
		errors []string
	}{
		{
			name: "file over defaults",
			opts: LoadOptions{Collector: CollectorSettings{Interval: time.Second, MaxSeries: 100}},
			check: func(c *Config) string {
				if c.Collector.Interval != 2*time.Second || c.Collector.MaxSeries != 500 || c.ExternalURL != "http://file.example:9464" {
					return "file values lost"
				}
				return ""
			},
		},
		{
			name: "flags over file",
			opts: LoadOptions{Collector: CollectorSettings{Interval: 3 * time.Second, MaxSeries: 100, Binaries: []string{"/bin/sh"}},
				Flags: map[string]string{"interval": "--interval", "max_series": "--max-series", "binaries": "--binary"}, ExternalURL: "http://flag.example:1"},
			check: func(c *Config) string {
				if c.Collector.Interval != 3*time.Second || c.Collector.MaxSeries != 100 || c.ExternalURL != "http://flag.example:1" || len(c.Collector.Binaries) != 1 {
					return "flag values lost"
				}
				return ""
			},
		},
		{
			name: "bad flags",
			opts: LoadOptions{Collector: CollectorSettings{Interval: -time.Second, Sources: []string{"perf"}, RingbufBytes: 3000, Binaries: []string{"/nonexistent/x"}},
				Flags: map[string]string{"interval": "--interval", "sources": "--source", "ringbuf_bytes": "--ringbuf-bytes", "binaries": "--binary"}, ExternalURL: "ftp://x"},
			errors: []string{
				`--interval: must be positive, not -1s`,
				`--source: unknown source "perf"`,
				`--binary: stat /nonexistent/x: no such file or directory`,
				`--ringbuf-bytes: 3000 is less than a page`,
				`--external-url: "ftp://x": want an http or https URL`,
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := Parse("rules.yaml", file, tc.opts)
			if len(tc.errors) > 0 {
				var list ErrorList
				if !errors.As(err, &list) || len(list) != len(tc.errors) {
					t.Fatalf("err = %v", err)
				}
				for i, e := range list {
					if e.File != "" || !strings.HasPrefix(e.Msg, tc.errors[i]) {
						t.Errorf("problem %d = %q, want %q", i, e.Error(), tc.errors[i])
					}
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if msg := tc.check(cfg); msg != "" {
				t.Errorf("%s: %+v, external URL %q", msg, cfg.Collector, cfg.ExternalURL)
			}
		})
	}
}

// TestErrorOrder checks the report order: the configuration file's
// problems by position, then the other files' in the order reported, then
// the command line's. Every decoder reports positioned errors
// (section.Error); an error without one is the file's.
func TestErrorOrder(t *testing.T) {
	d := section.NewDecoder("a.yaml", nil)
	d.Flag("--interval: bad")
	d.Add(&section.Error{File: "a.yaml", Line: 9, Col: 1, Msg: "nine"})
	d.Add(errors.Join(&section.Error{File: "a.yaml", Line: 3, Col: 5, Msg: "three"}, &section.Error{File: "a.yaml", Line: 3, Col: 2, Msg: "three-two"}))
	d.Add(&section.Error{File: "p.rego", Line: 1, Col: 1, Msg: "rego"})
	d.Add(errors.New("not positioned"))
	got := d.Errors().Sorted("a.yaml").Error()
	want := "a.yaml: not positioned\na.yaml:3:2: three-two\na.yaml:3:5: three\na.yaml:9:1: nine\np.rego:1:1: rego\n--interval: bad"
	if got != want {
		t.Errorf("order:\n%s\nwant:\n%s", got, want)
	}
}

// TestRestartChanges checks what a reload can apply and what waits for a
// restart, and what runs after such a reload.
func TestRestartChanges(t *testing.T) {
	base := func() *Config {
		return &Config{
			Collector: CollectorSettings{Interval: time.Second, MaxSeries: 100, Sources: []string{"marker"}},
			Notify:    &notify.Config{Routing: notify.Routing{Outbox: notify.Outbox{Path: "/a/outbox.db"}}},
			Sources:   []usdt.SpanSource{{Binary: "/bin/x", Span: "s", Pos: section.Pos{File: "f", Line: 1, Col: 1}}},
			Functions: []function.Target{{Binary: "/bin/y", Functions: mustGlob(t, "g"), Declared: "f:2:1"}},
		}
	}
	for _, tc := range []struct {
		name string
		edit func(*Config)
		keys []string
	}{
		{"nothing", func(*Config) {}, nil},
		{"interval is live", func(c *Config) { c.Collector.Interval = 5 * time.Second }, nil},
		{"source moved in the file", func(c *Config) { c.Sources[0].Pos.Line = 9 }, nil},
		{"max_series", func(c *Config) { c.Collector.MaxSeries = 200 }, []string{"collector.max_series"}},
		{"ringbuf and kprobe", func(c *Config) { c.Collector.RingbufBytes = 1 << 20; c.Collector.ForceKprobe = true },
			[]string{"collector.ringbuf_bytes", "collector.force_kprobe"}},
		{"collector sources", func(c *Config) { c.Collector.Sources = nil }, []string{"collector.sources"}},
		{"usdt sources", func(c *Config) { c.Sources = nil }, []string{"sources"}},
		{"tracepoint sources", func(c *Config) { c.Tracepoints = []tpsource.Source{{Span: "t"}} }, []string{"sources"}},
		{"function sources", func(c *Config) { c.Functions = []function.Target{{Binary: "/bin/x", Functions: mustGlob(t, "f")}} }, []string{"sources"}},
		{"function source moved in the file", func(c *Config) { c.Functions[0].Declared = "f:9:1" }, nil},
		{"outbox path", func(c *Config) { c.Notify.Routing.Outbox.Path = "/b/outbox.db" }, []string{"routing.outbox.path"}},
		{"metrics", func(c *Config) {
			c.Metrics = metrics.Config{Bounds: []time.Duration{time.Second}, NoNativeHistograms: true, NoExemplars: true, SeriesTTL: time.Minute}
		}, []string{"metrics.buckets", "metrics.native_histograms", "metrics.exemplars", "metrics.series_ttl"}},
		{"listener", func(c *Config) {
			c.Listener = ListenerSettings{WebConfigFile: "/etc/spanwatch/web.yml", MaxInFlight: 3, WriteTimeout: time.Minute, KernelAddresses: true}
		}, []string{"listener.web_config_file", "listener.max_in_flight", "listener.write_timeout", "listener.kernel_addresses"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			running, next := base(), base()
			tc.edit(next)
			changes := restartChanges(running, next)
			var keys []string
			for _, c := range changes {
				keys = append(keys, c.Key)
			}
			if !reflect.DeepEqual(keys, tc.keys) {
				t.Fatalf("restart changes %v, want %v", changes, tc.keys)
			}
			eff := keepRunning(running, next, changes)
			if eff.Collector.Interval != next.Collector.Interval {
				t.Errorf("interval %s not applied", eff.Collector.Interval)
			}
			if len(changes) > 0 {
				if len(restartChanges(running, eff)) != 0 {
					t.Errorf("what runs after the reload differs from what ran: %v", restartChanges(running, eff))
				}
			}
		})
	}
	// Webhooks where none ran need a restart; the reload runs on without.
	running, next := base(), base()
	running.Notify = nil
	changes := restartChanges(running, next)
	if len(changes) != 1 || changes[0].Key != "webhooks" {
		t.Fatalf("changes = %v", changes)
	}
	if eff := keepRunning(running, next, changes); eff.Notify != nil {
		t.Error("webhooks applied without a dispatcher")
	}
}

func TestBudgetsOnly(t *testing.T) {
	cfg, err := Load("testdata/good/full.yaml", LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	b := cfg.BudgetsOnly()
	if len(b.Rules.Rules) != 0 || len(b.Rules.Policies) != 0 || b.Notify != nil || b.Path != "" || len(b.Rules.Budgets) != 1 {
		t.Errorf("budgets only: %+v", b)
	}
	if len(cfg.Rules.Rules) != 1 || cfg.Notify == nil {
		t.Error("BudgetsOnly changed the original")
	}
	if got, ok := b.Rules.BudgetFor("checkout"); !ok || got != 250*time.Millisecond {
		t.Errorf("budget = %v, %v", got, ok)
	}
}

// TestWebhooksInWholeFile reads one whole configuration file: package
// config splits it once and hands webhooks: and routing: to package
// notify, which decodes them with their positions in the same file.
func TestWebhooksInWholeFile(t *testing.T) {
	outbox := filepath.Join(t.TempDir(), "outbox.db")
	const file = `budgets:
  - span: checkout
    budget: 250ms
rules:
  - name: CheckoutSlow
    span: checkout
    when: p99 > 200ms
webhooks:
  - name: ops
    url: https://alerts.example/hook
    group_by: [alertname, span]
    %s
routing:
  outbox: {path: %s, max_entries: 500}
`
	cfg, err := Parse("spanwatch.yaml", []byte(fmt.Sprintf(file, "send_resolved: false", outbox)), LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	c := cfg.Notify
	if w := c.Webhooks[0]; w.Name != "ops" || w.SendResolved || len(w.GroupBy) != 2 || c.Routing.Outbox.MaxEntries != 500 {
		t.Errorf("config %+v", c)
	}
	if len(cfg.Rules.Rules) != 1 || len(cfg.Rules.Budgets) != 1 {
		t.Errorf("rules %+v", cfg.Rules)
	}

	_, err = Parse("spanwatch.yaml", []byte(fmt.Sprintf(file, "send_resolvd: false", outbox)), LoadOptions{})
	if err == nil || !strings.HasPrefix(err.Error(), `spanwatch.yaml:12:5: unknown key "send_resolvd"`) {
		t.Errorf("error %v, want it located in the whole file", err)
	}
}

func mustGlob(t *testing.T, pattern string) *glob.Glob {
	t.Helper()
	g, err := glob.Compile(pattern)
	if err != nil {
		t.Fatal(err)
	}
	return g
}
