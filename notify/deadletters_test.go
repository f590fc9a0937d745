package notify

import (
	"encoding/json"
	"errors"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/spanwatch/spanwatch/alert"
)

// TestDeadLetters has a receiver refuse two notifications: DeadLetters
// lists them from the running dispatcher with the receiver's answer and
// the body that was refused; ReadDeadLetters cannot open the outbox while
// the dispatcher holds it, and lists the same once it is closed.
func TestDeadLetters(t *testing.T) {
	dir := t.TempDir()
	rc := newReceiver(t, func(_ int, w http.ResponseWriter, _ *http.Request) bool {
		http.Error(w, "unknown tenant", http.StatusForbidden)
		return true
	}).start()
	d, err := New(webhookConfig(t, rc.srv.URL, dir, "group_by: [span]"), Options{Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if list, err := d.DeadLetters(); err != nil || len(list) != 0 {
		t.Fatalf("dead letters of a fresh outbox: %v, %v", list, err)
	}
	notifyOK(t, d, mkAlert("a", 1, alert.StateFiring, time.Now()), mkAlert("b", 1, alert.StateFiring, time.Now()))
	var list []DeadLetter
	waitFor(t, 5*time.Second, "two dead letters", func() bool {
		list, err = d.DeadLetters()
		return err == nil && len(list) == 2
	})
	spans := map[string]bool{}
	for _, dl := range list {
		if dl.Webhook != "test" || dl.Reason != ReasonHTTP4xx || !strings.Contains(dl.Error, "unknown tenant") || dl.Alerts != 1 || dl.ID == "" || dl.At.IsZero() {
			t.Errorf("dead letter %+v", dl)
		}
		var m Message
		if err := json.Unmarshal(dl.Body, &m); err != nil || len(m.Alerts) != 1 {
			t.Fatalf("body %s: %v", dl.Body, err)
		}
		spans[m.Alerts[0].Labels["span"]] = true
	}
	if !spans["a"] || !spans["b"] || list[0].At.After(list[1].At) {
		t.Errorf("dead letters %+v: want a and b, oldest first", list)
	}

	path := filepath.Join(dir, "outbox.db")
	if _, err := ReadDeadLetters(path); !errors.Is(err, ErrOutboxInUse) || !strings.Contains(err.Error(), "/api/dead-letters") {
		t.Errorf("ReadDeadLetters while the agent runs: %v", err)
	}
	d.Close()
	offline, err := ReadDeadLetters(path)
	if err != nil || len(offline) != 2 || offline[0].ID != list[0].ID || offline[1].ID != list[1].ID {
		t.Errorf("ReadDeadLetters = %+v, %v", offline, err)
	}
	if _, err := ReadDeadLetters(filepath.Join(dir, "missing.db")); err == nil {
		t.Error("ReadDeadLetters of a missing file succeeded")
	}
}
