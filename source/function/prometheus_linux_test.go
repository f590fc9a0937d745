//go:build linux

package function

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/spanwatch/spanwatch/collector"
	"github.com/spanwatch/spanwatch/internal/glob"
	"github.com/spanwatch/spanwatch/snapshot"
)

// The functions TestPrometheus traces: the query API's handler and the
// engine's exec, each called once per instant query.
const (
	promHandler = "github.com/prometheus/prometheus/web/api/v1.(*API).query"
	promExec    = "github.com/prometheus/prometheus/promql.(*Engine).exec"
)

// globEscape makes a function's name a glob matching it alone.
var globEscape = strings.NewReplacer(`\`, `\\`, `*`, `\*`, `?`, `\?`, `!`, `\!`)

// TestPrometheus traces Debian's prometheus (Go 1.19, stripped, its
// functions known from its pclntab only) as a user would: it serves
// fast and slow instant queries through /api/v1/query, and every query
// must be one span of the query handler and one of the engine's exec; a
// budget on exec catches exactly the slow ones (a subquery of 172,800
// steps, tens of milliseconds, against vector(1), well under one), and
// their overrun stacks, walked by frame pointers from exec's return
// instruction, reach prometheus's HTTP handlers and the goroutine's root.
func TestPrometheus(t *testing.T) {
	needGo(t)
	const bin = "/usr/bin/prometheus"
	if _, err := os.Stat(bin); err != nil {
		t.Skipf("%s: %v (apt-get install prometheus)", bin, err)
	}
	dir := t.TempDir()
	cfg := filepath.Join(dir, "prometheus.yml")
	if err := os.WriteFile(cfg, []byte("global:\n  scrape_interval: 1h\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()

	c, err := collector.New(context.Background(), collector.Config{Sources: collector.Sources{Marker: true}, ScanInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	// The prometheus this test starts, by pid: another prometheus on the
	// host (another package's test runs one) must not add its queries.
	cmd := exec.Command(bin, "--config.file="+cfg, "--storage.tsdb.path="+filepath.Join(dir, "data"),
		"--web.listen-address="+addr, "--log.level=warn")
	cmd.Stdout, cmd.Stderr = io.Discard, io.Discard
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	var targets []Target
	for _, name := range []string{promHandler, promExec} {
		g, err := glob.Compile(globEscape.Replace(name))
		if err != nil {
			t.Fatal(err)
		}
		targets = append(targets, Target{PID: cmd.Process.Pid, Functions: g})
	}
	s, err := Attach(context.Background(), c.SourceCore(), targets)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for _, tr := range s.Traced() {
		t.Logf("%s: first instruction %#x, entry probe %#x (%s), %d returns", tr.Func.Name, tr.Func.Offset, tr.Func.Entry, tr.Func.EntryAfter, len(tr.Func.Returns))
	}
	const budget = 5 * time.Millisecond
	if err := c.SetBudgets([]collector.BudgetRule{{Span: globEscape.Replace(promExec), Budget: budget}}); err != nil {
		t.Fatal(err)
	}

	base := "http://" + addr
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		r, err := http.Get(base + "/-/ready")
		if err == nil {
			r.Body.Close()
			if r.StatusCode == http.StatusOK {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("prometheus not ready at %s after 30 s: %v", base, err)
		}
	}
	if _, err := c.Snapshot(); err != nil { // a fresh window
		t.Fatal(err)
	}

	const fast, slow = 40, 6
	query := func(q string) time.Duration {
		start := time.Now()
		r, err := http.Get(base + "/api/v1/query?" + url.Values{"query": {q}}.Encode())
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(r.Body)
		r.Body.Close()
		if r.StatusCode != http.StatusOK || !strings.Contains(string(body), `"status":"success"`) {
			t.Fatalf("query %q: %s: %s", q, r.Status, body)
		}
		return time.Since(start)
	}
	var slowest, fastest time.Duration
	// A fast query whose round trip took the budget or more (a loaded
	// machine) may have run exec over budget too: exec runs within the
	// round trip, so only those can add to the slow ones.
	lateFast := 0
	for i := range fast + slow {
		if i%(fast/slow+1) == 0 && i/(fast/slow+1) < slow {
			d := query("sum_over_time(vector(1)[2d:1s])")
			if fastest == 0 || d < fastest {
				fastest = d
			}
			continue
		}
		d := query(fmt.Sprintf("vector(%d)", i))
		if d > slowest {
			slowest = d
		}
		if d >= budget {
			lateFast++
		}
	}
	t.Logf("slow queries took at least %s through HTTP, fast ones at most %s (%d of them %s or more)", fastest, slowest, lateFast, budget)

	got := map[string]snapshot.Series{}
	var overruns []snapshot.Overrun
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline) &&
		(got[promHandler].Count < fast+slow || got[promExec].Count < fast+slow || len(overruns) < slow); time.Sleep(50 * time.Millisecond) {
		snap, err := c.Snapshot()
		if err != nil {
			t.Fatal(err)
		}
		for _, sr := range snap.Series {
			x := got[sr.Span]
			x.Count += sr.Count
			x.OverBudget += sr.OverBudget
			got[sr.Span] = x
		}
		overruns = append(overruns, snap.Overruns...)
	}
	for _, name := range []string{promHandler, promExec} {
		if n := got[name].Count; n != fast+slow {
			t.Errorf("%s: %d spans, want %d (one per query)", name, n, fast+slow)
		}
	}
	if n := got[promExec].OverBudget; n < slow || n > slow+uint64(lateFast) {
		t.Errorf("%s: %d over its %s budget, want %d (the slow queries; up to %d more for the fast ones whose round trip took that long)", promExec, n, budget, slow, lateFast)
	}
	if n := len(overruns); uint64(n) != got[promExec].OverBudget {
		t.Errorf("%d overrun records, want one per span over budget (%d)", n, got[promExec].OverBudget)
	}
	for i, o := range overruns {
		if o.Span != promExec || o.PID != uint32(cmd.Process.Pid) || o.DurationNs < uint64(budget) {
			t.Errorf("overrun %+v, want %s of pid %d over %s", o, promExec, cmd.Process.Pid, budget)
			continue
		}
		var frames []string
		for _, f := range o.UserStack {
			frames = append(frames, f.Function)
		}
		if i == 0 {
			t.Logf("an overrun of %s: user stack %v (%s)", time.Duration(o.DurationNs), frames, o.StackError)
		}
		joined := strings.Join(frames, " ")
		if len(frames) == 0 || frames[0] != promExec || !strings.Contains(joined, "web/api/v1.(*API).query") ||
			!strings.Contains(joined, "net/http.(*conn).serve") || frames[len(frames)-1] != "runtime.goexit" {
			t.Errorf("overrun stack %v: want %s first, the API's query handler, net/http's conn.serve and runtime.goexit last", frames, promExec)
		}
	}
	counts, err := s.Counts()
	if err != nil {
		t.Fatal(err)
	}
	if len(counts) != 0 {
		t.Errorf("counters %v, want none", counts)
	}
	t.Logf("%d queries (%d slow): handler %d spans, exec %d spans (%d over budget), %d overruns, counters %v",
		fast+slow, slow, got[promHandler].Count, got[promExec].Count, got[promExec].OverBudget, len(overruns), counts)
}
