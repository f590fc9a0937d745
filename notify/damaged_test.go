package notify

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/spanwatch/spanwatch/alert"
)

const damagedChildEnv = "SPANWATCH_NOTIFY_DAMAGED_CHILD"

// damagedConfig is an outbox with two webhooks: one that holds alerts in
// its groups (group_wait 1h; url, which the starts point at a receiver),
// and one that refuses every notification (dead letters).
func damagedConfig(url, refuses, outbox string) string {
	return fmt.Sprintf(`
webhooks:
  - {name: held, url: %s, group_wait: %s, group_interval: 50ms, min_backoff: 10ms, max_backoff: 50ms, match: {kind: held}}
  - {name: refuses, url: %s, group_wait: 0s, group_interval: 10ms, match: {kind: refused}}
routing:
  outbox: {path: %q, max_entries: 20000}
`, url, map[bool]string{true: "1h", false: "0s"}[strings.HasSuffix(url, ":1/hook")], refuses, outbox)
}

// TestDamagedOutboxChild is one start of the agent's dispatcher on the
// outbox TestDamagedOutbox damaged, in a process of its own: a fault
// there is a dead child, not a dead test. It prints its Stats as JSON
// once the salvaged alerts are delivered.
func TestDamagedOutboxChild(t *testing.T) {
	file := os.Getenv(damagedChildEnv)
	if file == "" {
		t.Skip("helper process of TestDamagedOutbox, run only by it")
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
	defer d.Close()
	if err := d.Flush(t.Context()); err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(d.Stats())
	fmt.Printf("stats %s\n", b)
	if list, err := d.DeadLetters(); err == nil {
		fmt.Printf("dead %d\n", len(list))
	}
}

// leafCounts sets the count field of every leaf page of a bbolt file to
// 0xffff: the damage that made bbolt's Tx.Check fault ("fatal error:
// fault") at every start.
func leafCounts(t *testing.T, path string) int {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	ps, n := os.Getpagesize(), 0
	for off := 2 * ps; off+16 <= len(data); off += ps {
		if binary.LittleEndian.Uint16(data[off+8:]) == 0x02 {
			binary.LittleEndian.PutUint16(data[off+10:], 0xffff)
			n++
		}
	}
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	return n
}

// TestDamagedOutbox fills an outbox with 3000 alerts held in their groups
// and some dead letters, damages every leaf page (count 0xffff), then
// starts a dispatcher on it three times, each in a child process: every
// start succeeds, the first moves the damaged file aside and salvages the
// alerts, which are then delivered; spanwatch notify dead-letters' reader
// lists the dead letters from the damaged copy instead of faulting.
func TestDamagedOutbox(t *testing.T) {
	if os.Getenv(damagedChildEnv) != "" {
		t.Skip("in the child")
	}
	dir := t.TempDir()
	outbox := filepath.Join(dir, "outbox.db")
	refuses := newReceiver(t, func(n int, w http.ResponseWriter, r *http.Request) bool {
		http.Error(w, "no", http.StatusBadRequest)
		return true
	}).start()
	cfgText := damagedConfig("http://127.0.0.1:1/hook", refuses.srv.URL, outbox)
	d, err := New(parseYAML(t, cfgText), Options{})
	if err != nil {
		t.Fatal(err)
	}
	var alerts []*alert.Alert
	for i := 0; i < 3000; i++ {
		a := mkAlert(fmt.Sprint("g", i%50), i, alert.StateFiring, time.Now())
		a.Labels["kind"] = "held"
		a.Fingerprint = alert.Fingerprint(a.Labels)
		alerts = append(alerts, a)
	}
	for i := 0; i < 20; i++ {
		a := mkAlert("dead", i, alert.StateFiring, time.Now())
		a.Labels["kind"], a.Labels["alertname"] = "refused", fmt.Sprint("Dead", i)
		a.Fingerprint = alert.Fingerprint(a.Labels)
		alerts = append(alerts, a)
	}
	notifyOK(t, d, alerts...)
	waitFor(t, 10*time.Second, "20 dead letters", func() bool { return d.Stats().Webhooks[1].Failures[ReasonHTTP4xx] == 20 })
	d.Close()
	leaves := leafCounts(t, outbox)
	damaged, _ := os.ReadFile(outbox)
	if p := os.Getenv("SPANWATCH_DAMAGED_OUTBOX_COPY"); p != "" {
		// A copy to try a spanwatch binary on (spanwatch run, notify
		// dead-letters), as the before/after figures were taken.
		os.WriteFile(p, damaged, 0o600)
	}

	// The reader of spanwatch notify dead-letters, on the damaged file.
	list, err := ReadDeadLetters(outbox)
	if !errors.Is(err, ErrOutboxDamaged) || len(list) != 20 {
		t.Errorf("dead letters of the damaged outbox: %d, %v; want 20 and ErrOutboxDamaged", len(list), err)
	}

	rc := newReceiver(t, nil).start()
	cfgFile := filepath.Join(dir, "spanwatch.yaml")
	if err := os.WriteFile(cfgFile, []byte(damagedConfig(rc.srv.URL, refuses.srv.URL, outbox)), 0o600); err != nil {
		t.Fatal(err)
	}
	for start := 1; start <= 3; start++ {
		cmd := exec.Command(os.Args[0], "-test.run=^TestDamagedOutboxChild$", "-test.v")
		cmd.Env = append(os.Environ(), damagedChildEnv+"="+cfgFile)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("start %d: %v\n%s", start, err, out)
		}
		var s Stats
		for _, line := range strings.Split(string(out), "\n") {
			if rest, ok := strings.CutPrefix(line, "stats "); ok {
				json.Unmarshal([]byte(rest), &s)
			}
		}
		t.Logf("start %d: exit 0, damaged file moved aside %v, records salvaged %d, unreadable %d", start, s.Outbox.MovedAside != "", s.Outbox.Salvaged, s.Outbox.Unreadable)
		if start == 1 {
			if s.Outbox.MovedAside == "" || s.Outbox.Salvaged < 3000+20 {
				t.Errorf("first start: moved aside %q, salvaged %d records, want the file aside and at least 3020", s.Outbox.MovedAside, s.Outbox.Salvaged)
			}
			kept, err := os.ReadFile(s.Outbox.MovedAside)
			if err != nil || string(kept) != string(damaged) {
				t.Errorf("the damaged copy was not kept as it was (%v)", err)
			}
			if !strings.Contains(string(out), "dead 20") {
				t.Errorf("the salvaged outbox lacks the 20 dead letters:\n%s", out)
			}
		} else if s.Outbox.MovedAside != "" {
			t.Errorf("start %d: the fresh outbox was moved aside too: %s", start, s.Outbox.Damage)
		}
	}
	delivered := map[string]bool{}
	for _, m := range rc.messages() {
		for _, a := range m.Alerts {
			delivered[a.Fingerprint] = true
		}
	}
	t.Logf("%d leaf pages damaged; %d of 3000 salvaged alerts delivered", leaves, len(delivered))
	if len(delivered) != 3000 {
		t.Errorf("%d of 3000 alerts delivered after the salvage", len(delivered))
	}
}
