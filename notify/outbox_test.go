package notify

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/spanwatch/spanwatch/alert"
)

const childEnv = "SPANWATCH_NOTIFY_TEST_CHILD"

// childConfig is the config file the SIGKILL test's child and its restart
// share.
func childConfig(url, outbox, groupWait string) string {
	return fmt.Sprintf(`
webhooks:
  - name: test
    url: %s
    timeout: 200ms
    group_wait: %s
    group_interval: 50ms
    min_backoff: 10ms
    max_backoff: 50ms
routing:
  outbox:
    path: %q
`, url, groupWait, outbox)
}

// childAlerts returns ten alerts per group; started long ago (so they
// skip group_wait) or just now.
func childAlerts(groups []string, old bool) []*alert.Alert {
	start := time.Now()
	if old {
		start = time.Unix(1700000000, 0)
	}
	var out []*alert.Alert
	for _, g := range groups {
		for i := range 10 {
			out = append(out, mkAlert(g, i, alert.StateFiring, start))
		}
	}
	return out
}

var (
	queuedGroups  = []string{"q0", "q1", "q2", "q3", "q4"}
	waitingGroups = []string{"w0", "w1", "w2", "w3", "w4"}
)

// TestOutboxChild is the process TestSIGKILLResumesDelivery kills: it
// accepts alerts while the receiver is down and then waits to be killed.
func TestOutboxChild(t *testing.T) {
	file := os.Getenv(childEnv)
	if file == "" {
		t.Skip("helper process of TestSIGKILLResumesDelivery, run only by it")
	}
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	c, err := ParseConfigFile(file, data)
	if err != nil {
		t.Fatal(err)
	}
	d, err := New(c, Options{})
	if err != nil {
		t.Fatal(err)
	}
	// These alerts started long ago, so their groups flush at once into
	// the delivery queue, where they are retried against the dead
	// receiver...
	notifyOK(t, d, childAlerts(queuedGroups, true)...)
	waitFor(t, 10*time.Second, "queued notifications", func() bool { return d.Stats().Webhooks[0].QueueDepth == len(queuedGroups) })
	// ...these have just started: they wait in their groups (group_wait
	// is 1h here) when the kill comes.
	notifyOK(t, d, childAlerts(waitingGroups, false)...)
	if s := d.Stats().Webhooks[0]; s.QueueDepth != len(queuedGroups) || s.PendingAlerts != 10*len(queuedGroups)+10*len(waitingGroups) {
		t.Fatalf("before the kill: queue %d, pending %d", s.QueueDepth, s.PendingAlerts)
	}
	fmt.Println("ready")
	time.Sleep(time.Hour)
}

// TestSIGKILLResumesDelivery kills -9 a process holding undelivered alerts
// and checks that a restart on the same outbox delivers every one of them.
func TestSIGKILLResumesDelivery(t *testing.T) {
	if os.Getenv(childEnv) != "" {
		t.Skip("in the child")
	}
	dir := t.TempDir()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close() // the receiver is down while the child runs
	cfgFile := filepath.Join(dir, "spanwatch.yaml")
	outbox := filepath.Join(dir, "outbox.db")
	if err := os.WriteFile(cfgFile, []byte(childConfig("http://"+addr+"/hook", outbox, "1h")), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestOutboxChild$", "-test.v")
	cmd.Env = append(os.Environ(), childEnv+"="+cfgFile)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	ready := make(chan bool, 1)
	var childOut bytes.Buffer
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			childOut.WriteString(sc.Text() + "\n")
			if sc.Text() == "ready" {
				ready <- true
				return
			}
		}
		ready <- false
	}()
	select {
	case ok := <-ready:
		if !ok {
			cmd.Process.Kill()
			cmd.Wait()
			t.Fatalf("child exited before it was ready:\n%s", childOut.String())
		}
	case <-time.After(30 * time.Second):
		cmd.Process.Kill()
		cmd.Wait()
		t.Fatalf("child not ready after 30s:\n%s", childOut.String())
	}
	if err := cmd.Process.Signal(os.Kill); err != nil {
		t.Fatal(err)
	}
	err = cmd.Wait()
	if ee, ok := err.(*exec.ExitError); !ok || ee.String() != "signal: killed" {
		t.Fatalf("child ended with %v, want signal: killed", err)
	}

	// The receiver comes up on the address the child could not reach.
	rc := newReceiver(t, nil)
	l, err = net.Listen("tcp", addr)
	if err != nil {
		t.Fatalf("listen on %s again: %v", addr, err)
	}
	rc.srv.Listener.Close()
	rc.srv.Listener = l
	rc.start()

	// The restart uses a short group_wait, so the waiting groups flush.
	c := parseYAML(t, childConfig("http://"+addr+"/hook", outbox, "20ms"))
	d := mustNew(t, c)
	want := expected(append(childAlerts(queuedGroups, true), childAlerts(waitingGroups, false)...))
	waitFor(t, 20*time.Second, "every alert the killed process accepted", func() bool { return len(delivered(rc.messages())) >= len(want) })
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := d.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if diff := diffSets(delivered(rc.messages()), want); diff != "" {
		t.Errorf("after restart: %s", diff)
	}
	checkOrder(t, rc.messages())
}

// TestCorruptOutbox damages the outbox file in several ways and checks that
// the dispatcher still starts, reports the damage, keeps the damaged file
// aside, and delivers new alerts.
func TestCorruptOutbox(t *testing.T) {
	tests := []struct {
		name   string
		damage func(t *testing.T, path string)
	}{
		{"meta pages overwritten", func(t *testing.T, path string) {
			f, err := os.OpenFile(path, os.O_WRONLY, 0)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			if _, err := f.WriteAt(bytes.Repeat([]byte("garbage!"), 8192/8), 0); err != nil {
				t.Fatal(err)
			}
		}},
		{"data pages overwritten", func(t *testing.T, path string) {
			fi, err := os.Stat(path)
			if err != nil {
				t.Fatal(err)
			}
			f, err := os.OpenFile(path, os.O_WRONLY, 0)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			// Everything after the two meta pages: the freelist, the root
			// bucket pages and the records.
			junk := bytes.Repeat([]byte{0xa5}, int(fi.Size())-2*os.Getpagesize())
			if _, err := f.WriteAt(junk, int64(2*os.Getpagesize())); err != nil {
				t.Fatal(err)
			}
		}},
		{"not a bbolt file", func(t *testing.T, path string) {
			if err := os.WriteFile(path, []byte("this is not a database\n"), 0o600); err != nil {
				t.Fatal(err)
			}
		}},
		{"truncated", func(t *testing.T, path string) {
			if err := os.Truncate(path, 100); err != nil {
				t.Fatal(err)
			}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			down := "http://127.0.0.1:1/hook" // nothing listens on port 1
			c := webhookConfig(t, down, dir, "")
			d := mustNew(t, c)
			notifyOK(t, d, mkAlert("a", 1, alert.StateFiring, time.Now()))
			d.Close()
			path := c.Routing.Outbox.Path
			tt.damage(t, path)
			damaged, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}

			rc := newReceiver(t, nil).start()
			c = webhookConfig(t, rc.srv.URL, dir, "")
			var logs syncBuffer
			d, err = New(c, Options{Logger: slog.New(slog.NewTextHandler(&logs, nil))})
			if err != nil {
				t.Fatalf("New on a damaged outbox: %v", err)
			}
			defer d.Close()
			s := d.Stats().Outbox
			if s.MovedAside == "" || s.Damage == "" {
				t.Fatalf("stats do not report the damage: %+v", s)
			}
			if !strings.Contains(logs.String(), "outbox damaged") || !strings.Contains(logs.String(), s.MovedAside) {
				t.Errorf("log does not report the damage and the copy:\n%s", logs.String())
			}
			kept, err := os.ReadFile(s.MovedAside)
			if err != nil {
				t.Fatalf("damaged copy: %v", err)
			}
			if !bytes.Equal(kept, damaged) {
				t.Errorf("the copy at %s differs from the damaged file", s.MovedAside)
			}
			notifyOK(t, d, mkAlert("b", 1, alert.StateFiring, time.Now()))
			waitFor(t, 5*time.Second, "delivery through the fresh outbox", func() bool { return len(rc.messages()) == 1 })
		})
	}
}

// TestOutboxInUse checks that an outbox held by another process is an
// error, not damage: the file must not be moved aside.
func TestOutboxInUse(t *testing.T) {
	c := webhookConfig(t, "http://127.0.0.1:1/", t.TempDir(), "")
	mustNew(t, c)
	_, err := New(c, Options{})
	if !errors.Is(err, ErrOutboxInUse) {
		t.Fatalf("second New on the same outbox: %v, want ErrOutboxInUse", err)
	}
	matches, _ := filepath.Glob(c.Routing.Outbox.Path + ".corrupt-*")
	if len(matches) != 0 {
		t.Errorf("an outbox in use was moved aside: %v", matches)
	}
}

// TestOutboxOverflow fills a small outbox and checks that further alerts
// are refused loudly: an error asking for a retry, and a counter.
func TestOutboxOverflow(t *testing.T) {
	dir := t.TempDir()
	c := webhookConfig(t, "http://127.0.0.1:1/", dir, "group_wait: 1h\ngroup_by: ['...']")
	c.Routing.Outbox.MaxEntries = 5
	d := mustNew(t, c)
	now := time.Now()
	var alerts []*alert.Alert
	for i := range 7 {
		alerts = append(alerts, mkAlert("a", i, alert.StateFiring, now))
	}
	retry, err := d.Notify(context.Background(), alerts...)
	if !errors.Is(err, ErrOutboxFull) || !retry {
		t.Fatalf("Notify into a full outbox: retry=%v err=%v, want retry and ErrOutboxFull", retry, err)
	}
	if !strings.Contains(err.Error(), "2 alert deliveries refused") {
		t.Errorf("error %q does not say how many were refused", err)
	}
	// An update of an alert already stored takes no room: accepted.
	notifyOK(t, d, mkAlert("a", 0, alert.StateResolved, now))
	s := d.Stats()
	if s.Outbox.Overflow != 2 || s.Outbox.Entries != 5 || s.Webhooks[0].PendingAlerts != 5 {
		t.Errorf("overflow %d entries %d pending %d, want 2, 5, 5", s.Outbox.Overflow, s.Outbox.Entries, s.Webhooks[0].PendingAlerts)
	}
}

// TestOrphanedWebhook removes a webhook from the configuration while it has
// undelivered notifications: they are kept and reported, and delivered when
// the webhook comes back.
func TestOrphanedWebhook(t *testing.T) {
	dir := t.TempDir()
	d := mustNew(t, webhookConfig(t, "http://127.0.0.1:1/", dir, ""))
	notifyOK(t, d, mkAlert("a", 1, alert.StateFiring, time.Now()))
	waitFor(t, 5*time.Second, "queued notification", func() bool { return d.Stats().Webhooks[0].QueueDepth == 1 })
	d.Close()

	c := webhookConfig(t, "http://127.0.0.1:1/", dir, "")
	c.Webhooks[0].Name = "other"
	var logs syncBuffer
	d2, err := New(c, Options{Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	if s := d2.Stats().Outbox; s.Orphaned != 2 { // the alert and its notification
		t.Errorf("orphaned %d, want 2", s.Orphaned)
	}
	if !strings.Contains(logs.String(), "webhook=test") {
		t.Errorf("orphans not logged:\n%s", logs.String())
	}
	d2.Close()

	rc := newReceiver(t, nil).start()
	d3 := mustNew(t, webhookConfig(t, rc.srv.URL, dir, ""))
	waitFor(t, 5*time.Second, "delivery once the webhook is back", func() bool { return len(rc.messages()) == 1 })
	_ = d3
}

// TestUnreadableQueueRecord plants a record that does not decode at the
// head of a webhook's queue: it goes to the dead letters, and the
// notifications behind it are delivered.
func TestUnreadableQueueRecord(t *testing.T) {
	dir := t.TempDir()
	d := mustNew(t, webhookConfig(t, "http://127.0.0.1:1/", dir, ""))
	notifyOK(t, d, mkAlert("a", 1, alert.StateFiring, time.Now()))
	waitFor(t, 5*time.Second, "queued notification", func() bool { return d.Stats().Webhooks[0].QueueDepth == 1 })
	d.Close()

	db, err := bolt.Open(filepath.Join(dir, "outbox.db"), 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	err = db.Update(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketQueue).Bucket([]byte("test")).Put(seqKey(0), []byte("{not json"))
	})
	db.Close()
	if err != nil {
		t.Fatal(err)
	}

	rc := newReceiver(t, nil).start()
	d = mustNew(t, webhookConfig(t, rc.srv.URL, dir, ""))
	waitFor(t, 5*time.Second, "the notification behind the bad record", func() bool { return len(rc.messages()) == 1 })
	var dead deadLetter
	d.db.View(func(tx *bolt.Tx) error {
		_, v := tx.Bucket(bucketDead).Bucket([]byte("test")).Cursor().First()
		return json.Unmarshal(v, &dead)
	})
	if string(dead.Body) != "{not json" || !strings.Contains(dead.Error, "unreadable") {
		t.Errorf("dead letter %+v, want the raw record kept", dead)
	}
}

func TestOutboxDirectoryCreated(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "state", "spanwatch")
	c := webhookConfig(t, "http://127.0.0.1:1/", dir, "")
	mustNew(t, c)
	fi, err := os.Stat(dir)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o700 {
		t.Errorf("outbox directory mode %v, want 0700", fi.Mode().Perm())
	}
	fi, err = os.Stat(c.Routing.Outbox.Path)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Errorf("outbox file mode %v, want 0600", fi.Mode().Perm())
	}
}

// TestRestoreRegroups changes group_by and match between runs: stored
// alerts join the groups of the new configuration, and those the webhook no
// longer matches leave it.
func TestRestoreRegroups(t *testing.T) {
	dir := t.TempDir()
	d := mustNew(t, webhookConfig(t, "http://127.0.0.1:1/", dir, "group_wait: 1h\ngroup_by: [alertname]"))
	a1, a2 := mkAlert("a", 1, alert.StateFiring, time.Now()), mkAlert("a", 2, alert.StateFiring, time.Now())
	a2.Labels["team"] = "other"
	a2.Fingerprint = alert.Fingerprint(a2.Labels)
	b1 := mkAlert("b", 1, alert.StateFiring, time.Now())
	notifyOK(t, d, a1, a2, b1)
	d.Close()

	rc := newReceiver(t, nil).start()
	d = mustNew(t, webhookConfig(t, rc.srv.URL, dir, "group_wait: 50ms\ngroup_by: ['...']\nmatch: {span: a}"))
	if s := d.Stats(); s.Webhooks[0].PendingAlerts != 2 || s.Outbox.Entries != 2 {
		t.Errorf("after restore: %d pending, %d entries; want 2 and 2 (b1 no longer matches)", s.Webhooks[0].PendingAlerts, s.Outbox.Entries)
	}
	waitFor(t, 5*time.Second, "one notification per alert", func() bool { return len(rc.messages()) == 2 })
	for _, m := range rc.messages() {
		if len(m.Alerts) != 1 || !maps.Equal(m.GroupLabels, m.Alerts[0].Labels) {
			t.Errorf("notification %v groups by %v, want all labels", alertNames(m), m.GroupLabels)
		}
	}
	// The resolution finds the regrouped alert: nothing is left behind.
	notifyOK(t, d, mkAlert("a", 1, alert.StateResolved, a1.StartsAt))
	waitFor(t, 5*time.Second, "the resolution", func() bool { return len(rc.messages()) == 3 })
	waitFor(t, 5*time.Second, "the group to go", func() bool { return d.Stats().Webhooks[0].PendingAlerts == 1 })
}

// TestReload changes the webhooks of a running dispatcher: stored alerts
// follow the new grouping, a new webhook starts receiving, counters carry
// over, and rejected configurations leave the running one in place.
func TestReload(t *testing.T) {
	dir := t.TempDir()
	a := newReceiver(t, func(n int, w http.ResponseWriter, r *http.Request) bool {
		if n == 1 {
			w.WriteHeader(http.StatusBadGateway) // one failure, to see counters carried over
			return true
		}
		return false
	}).start()
	b := newReceiver(t, nil).start()
	d := mustNew(t, webhookConfig(t, a.srv.URL, dir, "group_wait: 50ms"))
	notifyOK(t, d, mkAlert("x", 0, alert.StateFiring, time.Now()))
	waitFor(t, 5*time.Second, "first delivery", func() bool { return len(a.messages()) == 1 })
	notifyOK(t, d, mkAlert("x", 1, alert.StateFiring, time.Now()), mkAlert("x", 2, alert.StateFiring, time.Now()))

	c := parseYAML(t, fmt.Sprintf(`
webhooks:
  - {name: test, url: %q, group_wait: 20ms, group_interval: 1h, group_by: ["..."], min_backoff: 10ms}
  - {name: second, url: %q, group_wait: 20ms, group_interval: 20ms}
routing:
  outbox: {path: %q}
`, a.srv.URL, b.srv.URL, filepath.Join(dir, "outbox.db")))
	if err := d.Reload(c); err != nil {
		t.Fatal(err)
	}
	// The alerts held by the old group (group_interval 50ms, so maybe
	// already sent) now sit in one group each.
	waitFor(t, 5*time.Second, "the held alerts", func() bool { return len(delivered(a.messages())) == 3 })
	notifyOK(t, d, mkAlert("y", 1, alert.StateFiring, time.Now()))
	waitFor(t, 5*time.Second, "the new webhook", func() bool { return len(b.messages()) == 1 })
	if got := alertNames(b.messages()[0]); fmt.Sprint(got) != "[y 1/firing]" {
		t.Errorf("second webhook got %v, want only the alert sent after the reload", got)
	}
	s := d.Stats()
	if len(s.Webhooks) != 2 || s.Webhooks[0].Failures[ReasonHTTP5xx] != 1 || s.Webhooks[0].Attempts < 3 {
		t.Errorf("counters after reload: %+v", s.Webhooks)
	}

	bad := *c
	bad.Routing.Outbox.Path = filepath.Join(dir, "elsewhere.db")
	if err := d.Reload(&bad); err == nil || !strings.Contains(err.Error(), "restart spanwatch") {
		t.Errorf("reload with another outbox path: %v", err)
	}
	bad = *c
	bad.Webhooks = append([]Webhook(nil), c.Webhooks...)
	bad.Webhooks[1].TLS = &TLSConfig{CAFile: filepath.Join(dir, "missing.pem")}
	if err := d.Reload(&bad); err == nil || !strings.Contains(err.Error(), "ca_file") {
		t.Errorf("reload with a missing CA file: %v", err)
	}
	notifyOK(t, d, mkAlert("y", 2, alert.StateFiring, time.Now()))
	waitFor(t, 5*time.Second, "delivery after rejected reloads", func() bool { return len(delivered(b.messages())) == 2 })
	d.Close()
	if err := d.Reload(c); !errors.Is(err, ErrClosed) {
		t.Errorf("reload after Close: %v", err)
	}
}
