package detector

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/spanwatch/spanwatch/alert"
	"github.com/spanwatch/spanwatch/snapshot"
)

// memStore is a StateStore in memory.
type memStore struct {
	mu   sync.Mutex
	data map[string][]byte
}

func (m *memStore) SaveState(name string, data []byte) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.data[name] = append([]byte(nil), data...)
	return nil
}

func (m *memStore) LoadState(name string) ([]byte, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.data[name], nil
}

const restartRules = `
rules:
  - {name: Now, span: svc, when: count > 0, over: 0s}
  - {name: For10, span: svc, when: count > 0, for: 10s, over: 0s}
  - {name: Range, span: svc, when: count > 200, over: 1m}
`

// restartRun evaluates one-second windows of 10 spans of svc from second
// from to second to (excluded).
func restartRun(t *testing.T, d *Detector, from, to int) {
	t.Helper()
	for i := from; i < to; i++ {
		s := &snapshot.Snapshot{Version: snapshot.Version, Time: t0.Add(time.Duration(i) * time.Second), WindowNs: 1e9,
			Series: []snapshot.Series{spans("svc", 0, time.Second, repeat(uint64(time.Millisecond), 10)...)}}
		if _, err := d.Evaluate(context.Background(), s); err != nil {
			t.Fatal(err)
		}
	}
}

// episodes sums up what a receiver heard: for each alert, the distinct
// startsAt of its firing notifications (each a new episode to it), and
// whether a resolved one came.
func episodes(alerts []*alert.Alert) (starts map[string][]time.Time, resolved map[string]bool) {
	starts, resolved = map[string][]time.Time{}, map[string]bool{}
	for _, a := range alerts {
		n := a.Name()
		if a.State == alert.StateResolved {
			resolved[n] = true
			continue
		}
		if l := starts[n]; len(l) == 0 || !l[len(l)-1].Equal(a.StartsAt) {
			starts[n] = append(starts[n], a.StartsAt)
		}
	}
	return starts, resolved
}

// TestRestartKeepsAlertState runs a detector for 40 one-second windows,
// "kills" it (drops it without warning; its state was saved as it runs,
// at most SaveInterval old), and starts another on the same store 3 s
// later: every alert keeps firing with its startsAt (no new episode, no
// resolved), the pending for: progress and the 1-minute range's history
// come back. The same restart without the saved state is what it
// replaces: every alert fires again as a new episode, For10 10 s later
// and Range once its minute refills.
func TestRestartKeepsAlertState(t *testing.T) {
	for _, restore := range []bool{true, false} {
		t.Run(fmt.Sprintf("restore=%v", restore), func(t *testing.T) {
			store := &memStore{data: map[string][]byte{}}
			rec := &recorder{}
			cfg := Config{Notifier: rec, Store: store, ResendInterval: time.Minute, ExternalLabels: map[string]string{}}
			a := New(cfg)
			a.SetRules(mustParse(t, restartRules))
			restartRun(t, a, 0, 40)
			before, _ := episodes(rec.take())
			if len(before["Now"]) != 1 || len(before["For10"]) != 1 || len(before["Range"]) != 1 {
				t.Fatalf("before the restart: %v", before)
			}

			b := New(cfg)
			b.SetRules(mustParse(t, restartRules))
			if restore {
				rs, err := b.Restore(t0.Add(43 * time.Second))
				if err != nil {
					t.Fatal(err)
				}
				t.Logf("restored: %+v", rs)
				if rs.Firing != 3 || rs.Series != 1 || rs.Windows < 30 {
					t.Errorf("restored %+v, want 3 firing alerts and the minute of history", rs)
				}
			}
			restartRun(t, b, 43, 120)
			after, resolved := episodes(rec.take())
			refires := 0
			for _, name := range []string{"Now", "For10", "Range"} {
				for _, s := range after[name] {
					if !s.Equal(before[name][0]) {
						refires++
						t.Logf("%s fired again as a new episode %s after the restart", name, s.Sub(t0.Add(43*time.Second)))
					}
				}
				if len(after[name]) == 0 {
					t.Logf("%s was not sent after the restart: Alertmanager resolves it when its endsAt passes", name)
				}
			}
			t.Logf("restore=%v: %d re-fires, resolved sent for %v", restore, refires, resolved)
			if restore {
				if refires != 0 || len(resolved) != 0 {
					t.Errorf("after a restored restart: %d new episodes, resolved %v; want none", refires, resolved)
				}
				for _, name := range []string{"Now", "For10", "Range"} {
					if len(after[name]) == 0 {
						t.Errorf("%s was not sent again after the restart (its endsAt is not refreshed)", name)
					}
				}
			} else if refires != 3 {
				t.Errorf("without the state, %d re-fires; the test expects the 3 it replaces", refires)
			}
		})
	}
}

// TestRestartForProgress restarts while an alert is pending (5 s into its
// for: 10s): it fires at the time it would have without the restart,
// with the startsAt of that time.
func TestRestartForProgress(t *testing.T) {
	store := &memStore{data: map[string][]byte{}}
	rec := &recorder{}
	cfg := Config{Notifier: rec, Store: store, SaveInterval: time.Second, ExternalLabels: map[string]string{}}
	a := New(cfg)
	a.SetRules(mustParse(t, restartRules))
	restartRun(t, a, 0, 6) // pending since 0
	b := New(cfg)
	b.SetRules(mustParse(t, restartRules))
	if _, err := b.Restore(t0.Add(7 * time.Second)); err != nil {
		t.Fatal(err)
	}
	restartRun(t, b, 7, 15)
	starts, _ := episodes(rec.take())
	if len(starts["For10"]) != 1 || !starts["For10"][0].Equal(t0.Add(10*time.Second)) {
		t.Errorf("For10 fired at %v, want once, at 10s (for: progress kept over the restart)", starts["For10"])
	}
}

// TestRestoreTooOld does not restore a state older than MaxRestoreGap.
func TestRestoreTooOld(t *testing.T) {
	store := &memStore{data: map[string][]byte{}}
	cfg := Config{Notifier: &recorder{}, Store: store, ExternalLabels: map[string]string{}}
	a := New(cfg)
	a.SetRules(mustParse(t, restartRules))
	restartRun(t, a, 0, 5)
	b := New(cfg)
	rs, err := b.Restore(t0.Add(MaxRestoreGap + time.Minute))
	if err != nil || rs.Skipped == "" || rs.Firing != 0 {
		t.Errorf("restore of an old state: %+v, %v", rs, err)
	}
}

// TestRestartUnsentAlertResolves restarts between the save of an alert
// that fires and its notification (the state is saved first): the alert
// comes back firing, and when its rule no longer holds at the first
// evaluation it is sent firing (the same episode), then resolved. Sent
// resolved alone, no receiver would hear of it (notify drops an alert
// that resolved before its group was ever notified).
func TestRestartUnsentAlertResolves(t *testing.T) {
	store := &memStore{data: map[string][]byte{}}
	rec := &recorder{}
	cfg := Config{Notifier: rec, Store: store, ExternalLabels: map[string]string{}}
	a := New(cfg)
	a.SetRules(mustParse(t, restartRules))
	restartRun(t, a, 0, 1)
	fired, _ := episodes(rec.take()) // the kill: never written
	if len(fired["Now"]) != 1 {
		t.Fatalf("before the restart: %v", fired)
	}
	b := New(cfg)
	b.SetRules(mustParse(t, restartRules))
	if _, err := b.Restore(t0.Add(2 * time.Second)); err != nil {
		t.Fatal(err)
	}
	empty := &snapshot.Snapshot{Version: snapshot.Version, Time: t0.Add(2 * time.Second), WindowNs: 1e9}
	if _, err := b.Evaluate(context.Background(), empty); err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, al := range rec.take() {
		if al.Name() == "Now" {
			got = append(got, fmt.Sprintf("%s %s", al.State, al.StartsAt.Sub(t0)))
		}
	}
	if want := []string{"firing 0s", "resolved 0s"}; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("after the restart, Now was sent %q, want %q", got, want)
	}
}

// savesStore keeps every state saved, in order.
type savesStore struct {
	memStore
	saves [][]byte
}

func (s *savesStore) SaveState(name string, data []byte) error {
	s.mu.Lock()
	s.saves = append(s.saves, append([]byte(nil), data...))
	s.mu.Unlock()
	return s.memStore.SaveState(name, data)
}

// TestRestartEndedAlertNotFiredAgain checks that an alert killed between
// its resolved notification and the save that follows it (the state then
// holds it firing, marked ending) is sent resolved alone after the
// restart, not firing again: its firing went out before the kill, and its
// resolved may have, its group then gone from notify's log, where a
// firing would be a new notification.
func TestRestartEndedAlertNotFiredAgain(t *testing.T) {
	store := &savesStore{memStore: memStore{data: map[string][]byte{}}}
	rec := &recorder{}
	cfg := Config{Notifier: rec, Store: store, ExternalLabels: map[string]string{}}
	a := New(cfg)
	a.SetRules(mustParse(t, restartRules))
	restartRun(t, a, 0, 1)
	if fired, _ := episodes(rec.take()); len(fired["Now"]) != 1 {
		t.Fatalf("before the restart: %v", fired)
	}
	n := len(store.saves)
	empty := &snapshot.Snapshot{Version: snapshot.Version, Time: t0.Add(time.Second), WindowNs: 1e9}
	if _, err := a.Evaluate(context.Background(), empty); err != nil {
		t.Fatal(err)
	}
	if _, resolved := episodes(rec.take()); !resolved["Now"] {
		t.Fatal("Now did not resolve before the restart")
	}
	if len(store.saves) != n+2 {
		t.Fatalf("%d saves in the resolving evaluation, want 2 (before and after the notification)", len(store.saves)-n)
	}
	// The kill: after the notification, before the second save.
	store.data[stateName] = store.saves[n]
	b := New(cfg)
	b.SetRules(mustParse(t, restartRules))
	if _, err := b.Restore(t0.Add(2 * time.Second)); err != nil {
		t.Fatal(err)
	}
	empty = &snapshot.Snapshot{Version: snapshot.Version, Time: t0.Add(2 * time.Second), WindowNs: 1e9}
	if _, err := b.Evaluate(context.Background(), empty); err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, al := range rec.take() {
		if al.Name() == "Now" {
			got = append(got, fmt.Sprintf("%s %s", al.State, al.StartsAt.Sub(t0)))
		}
	}
	if want := []string{"resolved 0s"}; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("after the restart, Now was sent %q, want %q", got, want)
	}
}

// TestRestartEndedAlertWithRange is TestRestartEndedAlertNotFiredAgain for
// a rule with a range (the crash-only test's Held: count > 0 over 2s, for
// 1s), whose restored alerts are kept while the range refills, and for a
// condition that holds again after the restart. The alert saved as it
// resolved is sent resolved, never firing again in the same episode: the
// life before may have sent its resolved, and a receiver would get the
// episode's firing twice under two idempotency keys (CI, once in five
// runs). A condition holding again is a new episode.
func TestRestartEndedAlertWithRange(t *testing.T) {
	const rules = `
rules:
  - {name: Held, span: svc, when: count > 0, for: 1s, over: 2s}
`
	for _, back := range []bool{false, true} {
		t.Run(fmt.Sprintf("spans_again=%v", back), func(t *testing.T) {
			store := &savesStore{memStore: memStore{data: map[string][]byte{}}}
			rec := &recorder{}
			cfg := Config{Notifier: rec, Store: store, ExternalLabels: map[string]string{}}
			a := New(cfg)
			a.SetRules(mustParse(t, rules))
			restartRun(t, a, 0, 3)
			fired, _ := episodes(rec.take())
			if len(fired["Held"]) != 1 {
				t.Fatalf("before the restart: %v", fired)
			}
			started := fired["Held"][0]
			// Empty windows until the range holds no span: it resolves.
			var n int
			sec := 3
			for resolved := false; !resolved; sec++ {
				if sec > 10 {
					t.Fatal("Held did not resolve")
				}
				n = len(store.saves)
				empty := &snapshot.Snapshot{Version: snapshot.Version, Time: t0.Add(time.Duration(sec) * time.Second), WindowNs: 1e9}
				if _, err := a.Evaluate(context.Background(), empty); err != nil {
					t.Fatal(err)
				}
				_, r := episodes(rec.take())
				resolved = r["Held"]
			}
			// The kill: after the resolved notification, before the save
			// that follows it.
			store.data[stateName] = store.saves[n]
			b := New(cfg)
			b.SetRules(mustParse(t, rules))
			if _, err := b.Restore(t0.Add(time.Duration(sec) * time.Second)); err != nil {
				t.Fatal(err)
			}
			var got []string
			for i := 0; i < 5; i++ {
				s := &snapshot.Snapshot{Version: snapshot.Version, Time: t0.Add(time.Duration(sec+i) * time.Second), WindowNs: 1e9}
				if back {
					s.Series = []snapshot.Series{spans("svc", 0, time.Second, repeat(uint64(time.Millisecond), 10)...)}
				}
				if _, err := b.Evaluate(context.Background(), s); err != nil {
					t.Fatal(err)
				}
				for _, al := range rec.take() {
					got = append(got, fmt.Sprintf("%s %v", al.State, al.StartsAt.Equal(started)))
				}
			}
			want := []string{"resolved true"}
			if back {
				// The new episode fires after its for: 1s, with a new
				// startsAt.
				want = append(want, "firing false")
			}
			if len(got) > len(want) {
				got = got[:len(want)]
			}
			if fmt.Sprint(got) != fmt.Sprint(want) {
				t.Errorf("after the restart, Held was sent %q (state, same startsAt as before), want %q", got, want)
			}
		})
	}
}
