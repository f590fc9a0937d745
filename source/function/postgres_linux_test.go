//go:build linux

package function

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/spanwatch/spanwatch/collector"
	"github.com/spanwatch/spanwatch/internal/funcs"
	"github.com/spanwatch/spanwatch/internal/usdt"
	"github.com/spanwatch/spanwatch/snapshot"
)

// pgBin is Debian's PostgreSQL 15 (package postgresql-15).
const pgBin = "/usr/lib/postgresql/15/bin"

// TestPostgresQueries traces Debian's PostgreSQL 15 server's
// exec_simple_query, a static function its binary names nowhere (no
// .symtab): internal/funcs lists it unnamed, by its address, as the
// function holding the query__start USDT probe, and a target selects it
// by that address written 0x..., here through the rule file's
// functions: section (the only selector today: the address is this
// build's, and there is no name without the debug symbols). A
// throwaway cluster runs as the postgres user on a unix socket in the
// test's directory; one psql session sends simple queries, each its own
// simple-protocol message. Every query is one call of exec_simple_query,
// and psql -X sends nothing of its own on connecting (measured: a session
// with no statement makes no span), so:
//
//   - spans = the queries that completed: a query that fails (a DO block
//     that sleeps 50 ms and raises an error) leaves exec_simple_query by
//     siglongjmp to PostgresMain's sigsetjmp, so it makes no span, and
//     the next query's call at the same place replaces its entry
//     (replaced = failed queries, the last statement being a good one);
//     a wrong count means a missed return site or a wrong pair.
//   - over budget: at least the pg_sleep(0.05) queries, with a 25 ms
//     budget, and at most the completed queries psql timed (\timing) at
//     25 ms or more (those it timed, less the failed ones, which all
//     sleep 50 ms), since psql's time brackets the server's call: the
//     other queries take well under a millisecond, but a loaded machine
//     can stretch one (seen once at load average 11). A failed query's
//     entry, 50 ms old when it fails, paired with a later query's return
//     would make a span over the budget for a query psql timed fast.
//   - no unpaired return.
func TestPostgresQueries(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root (CAP_BPF, CAP_PERFMON, CAP_SYS_ADMIN) to load BPF and attach uprobes, and to run the server as postgres")
	}
	if runtime.GOARCH != "amd64" {
		t.Skip("the pairing is tested on x86-64 so far")
	}
	server := filepath.Join(pgBin, "postgres")
	for _, p := range []string{server, filepath.Join(pgBin, "initdb"), filepath.Join(pgBin, "psql")} {
		if _, err := os.Stat(p); err != nil {
			t.Skipf("no %s: install postgresql-15 (Debian's postgresql)", p)
		}
	}
	pgUser, err := user.Lookup("postgres")
	if err != nil {
		t.Skipf("no postgres user: %v (Debian's postgresql package creates it)", err)
	}
	uid, _ := strconv.Atoi(pgUser.Uid)
	gid, _ := strconv.Atoi(pgUser.Gid)

	esq := execSimpleQuery(t, server)
	t.Logf("exec_simple_query: %s (%d bytes), return sites %#x", esq.DisplayName(), esq.Size, esq.Returns)

	// The cluster: a directory the postgres user owns, under the test's
	// own (made traversable for it).
	top := t.TempDir()
	if err := os.Chmod(filepath.Dir(top), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(top, 0o755); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(top, "pg")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(dir, uid, gid); err != nil {
		t.Fatal(err)
	}
	asPostgres := func(name string, args ...string) *exec.Cmd {
		cmd := exec.Command(filepath.Join(pgBin, name), args...)
		cmd.Dir = dir
		cmd.Env = []string{"PATH=/usr/bin:/bin", "LC_ALL=C"}
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}}
		return cmd
	}
	data := filepath.Join(dir, "data")
	if out, err := asPostgres("initdb", "-D", data, "-A", "trust", "-U", "postgres", "--no-sync", "--no-locale", "-E", "UTF8").CombinedOutput(); err != nil {
		t.Fatalf("initdb: %v: %s", err, out)
	}
	srv := asPostgres("postgres", "-D", data, "-k", dir, "-c", "listen_addresses=", "-c", "fsync=off", "-c", "autovacuum=off")
	logf, err := os.Create(filepath.Join(top, "server.log"))
	if err != nil {
		t.Fatal(err)
	}
	defer logf.Close()
	srv.Stdout, srv.Stderr = logf, logf
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		srv.Process.Signal(syscall.SIGINT) // fast shutdown
		done := make(chan struct{})
		go func() { srv.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			srv.Process.Kill()
			<-done
		}
	}()
	psql := func(script string) string {
		cmd := exec.Command(filepath.Join(pgBin, "psql"), "-X", "-q", "-h", dir, "-U", "postgres", "-d", "postgres", "-v", "ON_ERROR_STOP=0", "-At")
		cmd.Stdin = strings.NewReader(script)
		out, _ := cmd.CombinedOutput() // failing queries make psql exit 3
		return string(out)
	}
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		if strings.TrimSpace(psql("SELECT 1;\n")) == "1" {
			break
		}
		if time.Now().After(deadline) {
			log, _ := os.ReadFile(logf.Name())
			t.Fatalf("the server did not answer in 30 s: %s", log)
		}
	}

	c, err := collector.New(context.Background(), collector.Config{Sources: collector.Sources{Marker: true}, ScanInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	// The target as a rule file declares it: the unnamed function by its
	// address, which is this build's (it changes with the package).
	targets, err := decode(t, filepath.Join(top, "rules.yaml"),
		fmt.Sprintf("- {binary: %s, function: %q, span: pg_query}\n", server, esq.DisplayName()))
	if err != nil || len(targets) != 1 {
		t.Fatalf("the rule file's functions: section: %v, %d targets", err, len(targets))
	}
	s, err := Attach(context.Background(), c.SourceCore(), targets)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := c.SetBudgets([]collector.BudgetRule{{Span: "pg_query", Budget: 25 * time.Millisecond}}); err != nil {
		t.Fatal(err)
	}
	read := func() snapshot.Series {
		var x snapshot.Series
		snap, err := c.Snapshot()
		if err != nil {
			t.Fatal(err)
		}
		for _, sr := range snap.Series {
			if sr.Span == "pg_query" {
				x.Count += sr.Count
				x.OverBudget += sr.OverBudget
			}
		}
		return x
	}
	read() // a fresh window

	// A session with no statement: what psql sends by itself.
	psql("")
	time.Sleep(100 * time.Millisecond)
	if n := read().Count; n != 0 {
		t.Errorf("an empty psql session made %d spans, want 0 (psql -X sends no query of its own)", n)
	}

	// The session: fast queries, slow ones and failing ones.
	const queries, slowEvery, failEvery = 300, 30, 50
	var script strings.Builder
	var slow, failed int
	for i := 1; i <= queries; i++ {
		switch {
		case i%slowEvery == 0:
			script.WriteString("SELECT pg_sleep(0.05);\n")
			slow++
		case i%failEvery == 0 && i != queries:
			script.WriteString("DO $$BEGIN PERFORM pg_sleep(0.05); RAISE EXCEPTION 'slow failure'; END$$;\n")
			failed++
		default:
			fmt.Fprintf(&script, "SELECT %d;\n", i)
		}
	}
	out := psql("\\timing on\n" + script.String())
	if n := strings.Count(out, "ERROR:  slow failure"); n != failed {
		t.Fatalf("psql: %d queries failed, want %d: %s", n, failed, out)
	}
	// psql's time of each query brackets its span (sent to answered): the queries it timed over the budget are the most
	// that can be over it without a wrong pair.
	timed, timedOver := 0, 0
	for _, line := range strings.Split(out, "\n") {
		if v, ok := strings.CutPrefix(line, "Time: "); ok {
			ms, err := strconv.ParseFloat(strings.Fields(v)[0], 64)
			if err != nil {
				t.Fatalf("psql said %q", line)
			}
			timed++
			if ms >= 25 {
				timedOver++
			}
		}
	}
	if timed != queries { // failed ones too
		t.Fatalf("psql timed %d queries, want %d: %s", timed, queries, out)
	}
	var got snapshot.Series
	for deadline := time.Now().Add(10 * time.Second); got.Count < uint64(queries-failed) && time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		x := read()
		got.Count += x.Count
		got.OverBudget += x.OverBudget
	}
	time.Sleep(200 * time.Millisecond)
	x := read()
	got.Count += x.Count
	got.OverBudget += x.OverBudget

	if got.Count != uint64(queries-failed) {
		t.Errorf("%d spans, want %d (%d queries, %d of them failed)", got.Count, queries-failed, queries, failed)
	}
	if got.OverBudget < uint64(slow) || got.OverBudget > uint64(timedOver-failed) {
		t.Errorf("%d spans over the 25ms budget, want %d-%d (the pg_sleep(0.05) queries, and the completed ones psql timed over it)", got.OverBudget, slow, timedOver-failed)
	}
	counts, err := s.Counts()
	if err != nil {
		t.Fatal(err)
	}
	if counts["functions/unpaired"] != 0 || counts["functions/replaced"] != uint64(failed) {
		t.Errorf("counters %v, want no unpaired return and %d replaced entries (the failed queries')", counts, failed)
	}
	t.Logf("%d queries (%d slow, %d failed, %d timed over 25 ms by psql): %d spans, %d over budget, counters %v", queries, slow, failed, timedOver, got.Count, got.OverBudget, counts)
}

// execSimpleQuery finds exec_simple_query in Debian's postgres, which
// has no .symtab: the function that holds the query__start probe.
func execSimpleQuery(t *testing.T, server string) funcs.Func {
	t.Helper()
	u, err := usdt.Open(server)
	if err != nil {
		t.Fatal(err)
	}
	probes := u.Lookup("postgresql", "query__start")
	if len(probes) != 1 {
		t.Fatalf("query__start: %d sites, want 1", len(probes))
	}
	f, err := funcs.Open(context.Background(), server, funcs.Options{})
	if err != nil {
		t.Fatal(err)
	}
	for _, fn := range f.Funcs {
		if probes[0].Address >= fn.Addr && probes[0].Address-fn.Addr < fn.Size {
			if fn.Refused != "" {
				t.Fatalf("exec_simple_query (%s) is refused: %s %s", fn.DisplayName(), fn.Refused, fn.Detail)
			}
			return fn
		}
	}
	t.Fatalf("no function holds query__start at %#x", probes[0].Address)
	return funcs.Func{}
}
