//go:build linux

package collector

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
	"unicode/utf8"

	usdtsource "github.com/spanwatch/spanwatch/source/usdt"

	"github.com/spanwatch/spanwatch/snapshot"
)

const (
	postgresBin = "/usr/lib/postgresql/15/bin/postgres"
	initdbBin   = "/usr/lib/postgresql/15/bin/initdb"
	python311   = "/usr/bin/python3.11"
)

// asUser returns the credential of a system user, or skips.
func asUser(t *testing.T, name string) *syscall.Credential {
	t.Helper()
	u, err := user.Lookup(name)
	if err != nil {
		t.Skipf("no %s user: install postgresql-15", name)
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
}

func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// statement returns a SQL statement longer than a span name whose byte
// 127 (the first that does not fit) continues a 2-byte UTF-8 character:
// differ makes two statements that differ at byte 98.
func statement(differ byte) string {
	s := "SELECT 'spanwatch " + strings.Repeat("x", 80) + string(differ)
	s += strings.Repeat("y", 126-len(s)) + "é" // é at bytes 126-127
	return s + strings.Repeat("z", 40) + "' AS long_text_column, 42 AS answer"
}

// TestUSDTPostgres traces Debian's PostgreSQL 15 (its query__start and
// query__done probes, semaphore-guarded, in short-lived backends) on
// loopback: statements longer than a span name are cut on a character
// boundary, two statements that differ past the old 63-byte limit are two
// series, and each is counted exactly.
func TestUSDTPostgres(t *testing.T) {
	for _, p := range []string{postgresBin, initdbBin} {
		if _, err := os.Stat(p); err != nil {
			t.Skipf("no %s: install postgresql-15", p)
		}
	}
	psql, err := exec.LookPath("psql")
	if err != nil {
		t.Skip("no psql: install postgresql-client-15")
	}
	requireBPF(t)
	cred := asUser(t, "postgres")
	dir, err := os.MkdirTemp("", "spanwatch-pg-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chown(dir, int(cred.Uid), int(cred.Gid)); err != nil {
		t.Fatal(err)
	}
	asPG := func(name string, args ...string) *exec.Cmd {
		cmd := exec.Command(name, args...)
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
		cmd.Dir = dir
		return cmd
	}
	data := filepath.Join(dir, "data")
	if out, err := asPG(initdbBin, "-D", data, "-A", "trust", "-U", "postgres", "--no-sync").CombinedOutput(); err != nil {
		t.Fatalf("initdb: %v: %s", err, out)
	}

	c, err := New(context.Background(), Config{Sources: Sources{Marker: true}, ScanInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	srcs := parseUSDTSources(t, fmt.Sprintf(`
sources:
  usdt:
    - binary: %s
      name_arg: 0
      start: {provider: postgresql, probe: query__start}
      end: {provider: postgresql, probe: query__done}
`, postgresBin))
	tr, err := usdtsource.Attach(context.Background(), c.SourceCore(), srcs)
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()

	port := freePort(t)
	pg := asPG(postgresBin, "-D", data, "-k", dir, "-p", strconv.Itoa(port), "-c", "listen_addresses=127.0.0.1", "-c", "fsync=off")
	var logs strings.Builder
	pg.Stdout, pg.Stderr = &logs, &logs
	if err := pg.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		pg.Process.Signal(syscall.SIGINT)
		pg.Wait()
	}()
	run := func(sql string) error {
		cmd := exec.Command(psql, "-X", "-q", "-v", "ON_ERROR_STOP=1", "-h", "127.0.0.1", "-p", strconv.Itoa(port), "-U", "postgres", "-d", "postgres")
		cmd.Stdin = strings.NewReader(sql)
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("psql: %v: %s", err, out)
		}
		return nil
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		err := run("SELECT 1;\n")
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("postgres did not come up: %v\n%s", err, logs.String())
		}
		time.Sleep(200 * time.Millisecond)
	}
	if _, err := c.Snapshot(); err != nil { // a fresh window
		t.Fatal(err)
	}
	a, b := statement('a'), statement('b')
	var sql strings.Builder
	for i := 0; i < 5; i++ {
		sql.WriteString(a + ";\n")
	}
	for i := 0; i < 3; i++ {
		sql.WriteString(b + ";\n")
	}
	// Each connection is a backend of its own, forked and gone.
	if err := run(sql.String()); err != nil {
		t.Fatal(err)
	}
	if err := run(a + ";\n"); err != nil {
		t.Fatal(err)
	}
	s, err := c.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	got := seriesByName(s)
	for _, w := range []struct {
		stmt  string
		count uint64
	}{{a, 6}, {b, 3}} {
		name := snapshot.TruncateName(w.stmt)
		if len(name) != 126 || !utf8.ValidString(name) || !strings.HasPrefix(w.stmt, name) {
			t.Fatalf("test statement cut to %d bytes %q: want the 126 bytes before é", len(name), name)
		}
		sr, ok := got[name]
		if !ok {
			t.Errorf("no series for %q (have %v)", name, keys(got))
			continue
		}
		if sr.Count != w.count || sr.Errors != 0 {
			t.Errorf("%q: count %d errors %d, want %d and 0", name, sr.Count, sr.Errors, w.count)
		}
		if sr.MinNs == 0 || sr.MaxNs > uint64(10*time.Second) {
			t.Errorf("%q: durations %d..%d ns", name, sr.MinNs, sr.MaxNs)
		}
	}
	if s.Stats.NamesTruncated == 0 {
		t.Error("no name counted as truncated")
	}
	if st, err := tr.Stats(); err != nil || st.Unpaired != 0 || st.NameFallback != 0 {
		t.Errorf("tracer stats %+v (%v): want no unpaired end and no fallback", st, err)
	}
}

// TestUSDTPython counts the calls of Python functions from Debian's
// CPython 3.11 through function__return (semaphore-guarded; in 3.11
// function__entry does not fire for Python-to-Python calls, gh-98894),
// each named by its function name argument: exact counts per name.
func TestUSDTPython(t *testing.T) {
	if _, err := os.Stat(python311); err != nil {
		t.Skipf("no %s: install python3.11", python311)
	}
	requireBPF(t)
	c, err := New(context.Background(), Config{Sources: Sources{Marker: true}, ScanInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	srcs := parseUSDTSources(t, fmt.Sprintf(`
sources:
  usdt:
    - binary: %s
      name_arg: 1
      probe: {provider: python, probe: function__return}
      labels: {line: arg2}
      label_cap: 5000
`, python311))
	tr, err := usdtsource.Attach(context.Background(), c.SourceCore(), srcs)
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	if _, err := c.Snapshot(); err != nil {
		t.Fatal(err)
	}
	script := `
def spanwatch_alpha(x):
    return x + 1

def spanwatch_beta(x):
    return spanwatch_alpha(x) * 2

for i in range(7):
    spanwatch_alpha(i)
for i in range(3):
    spanwatch_beta(i)
`
	if out, err := exec.Command(python311, "-I", "-S", "-c", script).CombinedOutput(); err != nil {
		t.Fatalf("python: %v: %s", err, out)
	}
	s, err := c.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]uint64{}
	lines := map[string]map[string]bool{}
	for _, sr := range s.Series {
		got[sr.Span] += sr.Count
		if sr.Count > 0 {
			if lines[sr.Span] == nil {
				lines[sr.Span] = map[string]bool{}
			}
			lines[sr.Span][sr.SourceLabels["line"]] = true
		}
	}
	// beta calls alpha: 7 + 3 returns of alpha, 3 of beta.
	if got["spanwatch_alpha"] != 10 || got["spanwatch_beta"] != 3 {
		t.Errorf("returns: alpha %d, beta %d; want 10 and 3", got["spanwatch_alpha"], got["spanwatch_beta"])
	}
	if !lines["spanwatch_alpha"]["3"] || !lines["spanwatch_beta"]["6"] {
		t.Errorf("return lines: %v", lines)
	}
}
