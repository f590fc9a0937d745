//go:build linux

package notify

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/spanwatch/spanwatch/alert"
)

const fullDiskEnv = "SPANWATCH_NOTIFY_FULLDISK_CHILD"

// fullDiskResult is what the child reports.
type fullDiskResult struct {
	Fired, DeliveredFiring, DeliveredResolved int
	WriteErrors, HeldDropped                  uint64
	HeldMax                                   int
	Took                                      time.Duration
}

// TestFullDiskChild runs in a mount namespace of its own (made by
// TestFullDisk): it mounts a small tmpfs on $dir, puts the outbox there,
// fills the disk, fires and resolves alerts while it is full, then frees
// the disk and waits for the receiver to hear of every one. The mount
// dies with the namespace; the machine never sees it.
func TestFullDiskChild(t *testing.T) {
	spec := os.Getenv(fullDiskEnv)
	if spec == "" {
		t.Skip("helper process of TestFullDisk, run only by it")
	}
	dir, nStr, _ := strings.Cut(spec, ",")
	nStr, maxHeldStr, _ := strings.Cut(nStr, ",")
	n, _ := strconv.Atoi(nStr)
	maxHeld, _ := strconv.Atoi(maxHeldStr)
	if err := unix.Mount("tmpfs", dir, "tmpfs", 0, "size=32m,mode=0700"); err != nil {
		t.Fatalf("mount tmpfs: %v", err)
	}
	firing, resolved := map[string]bool{}, map[string]bool{}
	rc := newReceiver(t, nil).start()
	cfg := parseYAML(t, fmt.Sprintf(`
webhooks:
  - {name: test, url: %s, group_by: ["..."], group_wait: 0s, group_interval: 50ms, min_backoff: 10ms, max_backoff: 50ms}
routing:
  outbox: {path: %q, max_entries: 100000}
`, rc.srv.URL, filepath.Join(dir, "outbox.db")))
	d, err := New(cfg, Options{Logger: testLogger(t), MaxHeld: maxHeld})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	// Fill the disk.
	filler := filepath.Join(dir, "filler")
	f, err := os.Create(filler)
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 64<<10)
	for {
		if _, err := f.Write(buf); err != nil {
			if !errors.Is(err, syscall.ENOSPC) {
				t.Fatal(err)
			}
			break
		}
	}
	f.Close()
	start := time.Now()
	var as []*alert.Alert
	for i := 0; i < n; i++ {
		as = append(as, mkAlert("full", i, alert.StateFiring, start))
	}
	// One Notify per alert, as the detector sends them over time.
	for _, a := range as {
		d.Notify(t.Context(), a)
	}
	for _, a := range as {
		r := *a
		r.State, r.EndsAt = alert.StateResolved, time.Now()
		d.Notify(t.Context(), &r)
	}
	s := d.Stats().Outbox
	res := fullDiskResult{Fired: n, HeldMax: s.Held}
	time.Sleep(300 * time.Millisecond) // some retries against the full disk
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		// Stats first, then the messages: a notification whose delivery
		// Stats counts was received before it, so the messages read after
		// hold it (read before, they could miss the last ones).
		st := d.Stats()
		drained := st.Outbox.Held == 0 && st.Webhooks[0].QueueDepth == 0 && st.Webhooks[0].OldestUndelivered == 0
		firing, resolved = map[string]bool{}, map[string]bool{}
		for _, m := range rc.messages() {
			for _, a := range m.Alerts {
				if a.Status == "firing" {
					firing[a.Fingerprint] = true
				} else {
					resolved[a.Fingerprint] = true
				}
			}
		}
		if drained && len(firing) > 0 {
			break // all written, every group notified, every notification delivered
		}
		time.Sleep(50 * time.Millisecond)
	}
	s = d.Stats().Outbox
	res.DeliveredFiring, res.DeliveredResolved = len(firing), len(resolved)
	res.WriteErrors, res.HeldDropped, res.Took = s.WriteErrors, s.HeldDropped, time.Since(start)
	b, _ := json.Marshal(res)
	fmt.Printf("result %s\n", b)
}

func runFullDisk(t *testing.T, n, maxHeld int) fullDiskResult {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root to mount a tmpfs in a mount namespace of its own")
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestFullDiskChild$", "-test.v")
	cmd.Env = append(os.Environ(), fmt.Sprintf("%s=%s,%d,%d", fullDiskEnv, t.TempDir(), n, maxHeld))
	// A private mount namespace: the tmpfs the child mounts is never seen
	// outside it (Go makes the new namespace's mounts private).
	cmd.SysProcAttr = &syscall.SysProcAttr{Unshareflags: syscall.CLONE_NEWNS}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("child: %v\n%s", err, out)
	}
	for _, line := range strings.Split(string(out), "\n") {
		if rest, ok := strings.CutPrefix(line, "result "); ok {
			var r fullDiskResult
			if err := json.Unmarshal([]byte(rest), &r); err != nil {
				t.Fatal(err)
			}
			return r
		}
	}
	t.Fatalf("no result from the child:\n%s", out)
	return fullDiskResult{}
}

// TestFullDisk puts the outbox on a real 32 MiB tmpfs that is full (in a
// mount namespace of the test's own), fires 3000 alerts and resolves them
// all while it is full, then frees the disk: every alert reaches the
// receiver firing, then resolved, from the alerts held in memory and
// written with backoff. With a hold of 1000, the rest are refused and
// counted, none silently lost.
func TestFullDisk(t *testing.T) {
	r := runFullDisk(t, 3000, DefaultMaxHeld)
	t.Logf("disk full: %d alerts fired and resolved; delivered %d firing, %d resolved of %d; %d writes failed and were retried; held at most %d; took %s",
		r.Fired, r.DeliveredFiring, r.DeliveredResolved, r.Fired, r.WriteErrors, r.HeldMax, r.Took.Round(time.Millisecond))
	if r.DeliveredFiring != r.Fired || r.DeliveredResolved != r.Fired || r.HeldDropped != 0 || r.WriteErrors == 0 {
		t.Errorf("%+v: want every alert delivered firing and resolved, write errors seen, none dropped", r)
	}

	r = runFullDisk(t, 3000, 1000)
	t.Logf("hold of 1000: %d held, %d refused and counted; delivered %d firing, %d resolved", r.HeldMax, r.HeldDropped, r.DeliveredFiring, r.DeliveredResolved)
	if r.HeldMax != 1000 || r.HeldDropped != 5000 || r.DeliveredFiring != 1000 {
		t.Errorf("%+v: want 1000 held and delivered, 5000 refused and counted", r)
	}
}
