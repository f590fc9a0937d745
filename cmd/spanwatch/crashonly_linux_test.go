//go:build linux

package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"math/rand"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/spanwatch/spanwatch/emit"
)

// emitGap is the shortest stall of the emitter that it reports.
const emitGap = 20 * time.Millisecond

// emitSchedule is the emitter of TestCrashOnly: spans named PREFIX.K, one
// name after another, each for EACH, K from 0, continuously (about one
// span a millisecond), until stdin closes. It prints "K UNIXNANO" when a
// name starts and "end UNIXNANO" when it stops, and "gap K FROM TO" (unix
// nanoseconds) when no span of name K ended for emitGap or longer: on a
// loaded machine the emitter itself waits for a CPU, and a window of the
// agent without a span is no window where the rule held. It does not
// wait for an agent: the agent comes and goes.
func emitSchedule(spec string) int {
	prefix, eachText, _ := strings.Cut(spec, ",")
	each, err := time.ParseDuration(eachText)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	stop := make(chan struct{})
	go func() { io.Copy(io.Discard, os.Stdin); close(stop) }()
	out := bufio.NewWriter(os.Stdout)
	for k := 0; ; k++ {
		last := time.Now() // when the last span of name K ended
		gap := func(now time.Time) {
			if now.Sub(last) >= emitGap {
				fmt.Fprintf(out, "gap %d %d %d\n", k, last.UnixNano(), now.UnixNano())
				out.Flush()
			}
			last = now
		}
		fmt.Fprintf(out, "%d %d\n", k, last.UnixNano())
		out.Flush()
		name := fmt.Sprintf("%s.%d", prefix, k)
		for end := last.Add(each); time.Now().Before(end); {
			select {
			case <-stop:
				now := time.Now()
				gap(now)
				fmt.Fprintf(out, "end %d\n", now.UnixNano())
				out.Flush()
				return 0
			default:
			}
			sp := emit.Start(name)
			time.Sleep(time.Millisecond)
			sp.End(nil)
			gap(time.Now())
		}
		gap(time.Now())
	}
}

// interval is a time interval.
type interval struct{ from, to time.Time }

// within returns how much of [from, to] the intervals in gaps cover
// (they do not overlap one another).
func within(gaps []interval, from, to time.Time) time.Duration {
	var d time.Duration
	for _, g := range gaps {
		if a, b := maxTime(g.from, from), minTime(g.to, to); b.After(a) {
			d += b.Sub(a)
		}
	}
	return d
}

// delivery is one alert of one notification the receiver took.
type delivery struct {
	key                string // X-Spanwatch-Idempotency-Key
	name, span, status string
	fingerprint        string
	startsAt, endsAt   time.Time
}

// crashReceiver is the webhook: it records every request and fails one in
// ten with a 503, so retries are under way when kills come.
type crashReceiver struct {
	mu    sync.Mutex
	rng   *rand.Rand
	got   []delivery
	reqs  int
	fails int
}

func (r *crashReceiver) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.reqs++
	if r.rng.Intn(10) == 0 {
		r.fails++
		http.Error(w, "try again", http.StatusServiceUnavailable)
		return
	}
	var m struct {
		Alerts []struct {
			Status      string            `json:"status"`
			Labels      map[string]string `json:"labels"`
			StartsAt    time.Time         `json:"startsAt"`
			EndsAt      time.Time         `json:"endsAt"`
			Fingerprint string            `json:"fingerprint"`
		} `json:"alerts"`
	}
	if err := json.NewDecoder(req.Body).Decode(&m); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	for _, a := range m.Alerts {
		r.got = append(r.got, delivery{key: req.Header.Get("X-Spanwatch-Idempotency-Key"), name: a.Labels["alertname"], span: a.Labels["span"],
			status: a.Status, fingerprint: a.Fingerprint, startsAt: a.StartsAt, endsAt: a.EndsAt})
	}
}

// TestCrashOnly kills the agent with SIGKILL 50 times while spans flow and
// alerts fire and resolve, and starts it again each time on the same
// outbox: half the kills at random moments, half at crash points inside
// the snapshot, the evaluation, an outbox write, a delivery and a reload
// (the binary is built with -tags crashtest; SIGHUPs and edits of the
// file come meanwhile). Then it lets a last agent drain the outbox and
// checks what the webhook received: every alert the agent had time to
// commit (its span flowed for 1 s or more while an agent ran) was
// delivered at least once; the same alert state sent twice carries the
// same idempotency key; no episode was resolved while its spans still
// flowed, and none fired again as a new episode.
//
// An agent runs from its "started" line (its marker is attached by then)
// to the moment it is killed: the SIGKILL the test sends, or its crash
// point's, which prints the time. Not to the moment the test reaps it:
// a killed agent runs no code, but its exit waits while the kernel tears
// down its BPF links and maps, which took up to 3.5 s on a loaded
// machine (load 13 on 2 cores). Spans flow while the emitter runs; the
// stalls it reports (emitSchedule) are no flow.
func TestCrashOnly(t *testing.T) {
	requireRoot(t)
	if testing.Short() {
		t.Skip("the crash-only loop takes minutes; -short leaves it out")
	}
	kills := 50
	if v, _ := strconv.Atoi(os.Getenv("SPANWATCH_CRASH_KILLS")); v > 0 {
		kills = v
	}
	began := time.Now()
	dir := t.TempDir()
	bin := filepath.Join(dir, "spanwatch")
	if out, err := exec.Command("go", "build", "-tags", "crashtest", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build -tags crashtest: %v\n%s", err, out)
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewSource(time.Now().UnixNano()))
	rx := &crashReceiver{rng: rand.New(rand.NewSource(1))}
	srv := httptest.NewServer(rx)
	defer srv.Close()

	prefix := fmt.Sprintf("crash.%d", os.Getpid())
	cfgPath := filepath.Join(dir, "spanwatch.yaml")
	writeCfg := func(budget string) {
		text := fmt.Sprintf(`rules:
  - {name: Hot, span: "%s.*", when: count > 0, over: 0s}
  - {name: Held, span: "%s.*", when: count > 0, for: 1s, over: 2s}
budgets:
  - {span: "%s.*", budget: %s}
collector:
  interval: 200ms
webhooks:
  - {name: rx, url: %q, group_by: ["..."], group_wait: 0s, group_interval: 200ms, repeat_interval: 1h, min_backoff: 50ms, max_backoff: 500ms}
routing:
  outbox: {path: %q}
`, prefix, prefix, prefix, budget, srv.URL, filepath.Join(dir, "outbox.db"))
		tmp := cfgPath + ".tmp"
		if err := os.WriteFile(tmp, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, cfgPath); err != nil {
			t.Fatal(err)
		}
	}
	writeCfg("1h")

	// The emitter: names of 2.5 s each, for the whole test.
	const each = 2500 * time.Millisecond
	em := exec.Command(self)
	em.Env = append(os.Environ(), "SPANWATCH_TEST_SCHEDULE="+prefix+","+each.String(), "SPANWATCH_EMIT=marker")
	emIn, err := em.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	emOut, err := em.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	em.Stderr = os.Stderr
	if err := em.Start(); err != nil {
		t.Fatal(err)
	}
	defer em.Process.Kill()
	var (
		emMu     sync.Mutex
		nameFrom []time.Time // by K, when name K started
		gaps     = map[int][]interval{}
		emEnd    time.Time
		emDone   = make(chan struct{})
	)
	go func() {
		defer close(emDone)
		sc := bufio.NewScanner(emOut)
		for sc.Scan() {
			f := strings.Fields(sc.Text())
			at := func(i int) time.Time {
				ns, _ := strconv.ParseInt(f[i], 10, 64)
				return time.Unix(0, ns)
			}
			emMu.Lock()
			switch {
			case len(f) == 2 && f[0] == "end":
				emEnd = at(1)
			case len(f) == 4 && f[0] == "gap":
				k, _ := strconv.Atoi(f[1])
				gaps[k] = append(gaps[k], interval{at(2), at(3)})
			case len(f) == 2:
				nameFrom = append(nameFrom, at(1))
			}
			emMu.Unlock()
		}
	}()

	type life struct {
		from, to time.Time
		point    string // the crash point it was killed at, "" for a random kill
		hit      bool   // killed by its crash point
		stderr   string
		killed   time.Time // when it got the SIGKILL, from the test or its crash point
	}
	// start runs the agent until it exits; during gets the process once
	// it has started and returns when the agent should get SIGKILL (or,
	// for the last run, SIGTERM).
	start := func(crashAt string, during func(p *os.Process, exited <-chan struct{}) syscall.Signal) life {
		var stderr lockedBuffer
		cmd := exec.Command(bin, "run", "--config", cfgPath, "--binary", self, "--source", "marker")
		cmd.Env = append(os.Environ(), "SPANWATCH_CRASH_AT="+crashAt)
		cmd.Stderr = &stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		exited := make(chan struct{})
		go func() { cmd.Wait(); close(exited) }()
		l := life{point: strings.Split(crashAt, ":")[0]}
		done := false
		for deadline := time.Now().Add(time.Minute); !strings.Contains(stderr.String(), "msg=started"); time.Sleep(5 * time.Millisecond) {
			select {
			case <-exited:
				done = true // killed at its crash point before it started
			default:
			}
			if done {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("the agent did not start:\n%s", stderr.String())
			}
		}
		if !done {
			l.from = time.Now()
			if sig := during(cmd.Process, exited); sig != 0 {
				if sig == syscall.SIGKILL {
					l.killed = time.Now()
				}
				cmd.Process.Signal(sig)
			}
			<-exited
			l.to = time.Now()
		}
		l.stderr = stderr.String()
		if _, after, ok := strings.Cut(l.stderr, "crashpoint "+l.point+":"); ok {
			l.hit = true
			// "crashpoint NAME:N: SIGKILL at UNIXNANO"
			_, at, _ := strings.Cut(after, " at ")
			at, _, _ = strings.Cut(at, "\n")
			ns, err := strconv.ParseInt(at, 10, 64)
			if err != nil {
				t.Fatalf("crash point line without its time: %q", after)
			}
			if k := time.Unix(0, ns); l.killed.IsZero() || k.Before(l.killed) {
				l.killed = k
			}
		}
		if !l.from.IsZero() && !l.killed.IsZero() && l.killed.Before(l.to) {
			l.to = maxTime(l.from, l.killed)
		}
		if strings.Contains(l.stderr, "fatal error") || strings.Contains(l.stderr, "panic:") {
			t.Fatalf("the agent crashed on its own:\n%s", l.stderr)
		}
		return l
	}
	points := []string{"snapshot", "evaluate", "outbox_write", "delivery", "reload"}
	var lives []life
	for i := 0; i < kills; i++ {
		crashAt := ""
		if i%2 == 1 {
			crashAt = fmt.Sprintf("%s:%d", points[(i/2)%len(points)], 1+rng.Intn(4))
		}
		if rng.Intn(3) == 0 {
			writeCfg([]string{"1h", "2h", "30m"}[rng.Intn(3)]) // a reload with a change
		}
		wait := time.Duration(300+rng.Intn(2700)) * time.Millisecond
		if crashAt != "" {
			wait = 4 * time.Second // the crash point's own kill comes first, mostly
		}
		lives = append(lives, start(crashAt, func(p *os.Process, exited <-chan struct{}) syscall.Signal {
			deadline := time.After(wait)
			for {
				select {
				case <-exited:
					return 0
				case <-deadline:
					return syscall.SIGKILL
				case <-time.After(time.Duration(100+rng.Intn(700)) * time.Millisecond):
					p.Signal(syscall.SIGHUP)
				}
			}
		}))
	}
	// The last agent runs until the emitter stops and the outbox drains.
	emIn.Close()
	<-emDone
	em.Wait()
	final := start("", func(p *os.Process, exited <-chan struct{}) syscall.Signal {
		time.Sleep(3 * time.Second)
		return syscall.SIGTERM
	})
	lives = append(lives, final)

	// What should have been delivered: every name that flowed for 1 s or
	// more while one agent ran (Hot), 2 s or more for Held (for: 1s), less
	// the emitter's stalls.
	emMu.Lock()
	nameTo := make([]time.Time, len(nameFrom))
	for k := range nameFrom {
		if k+1 < len(nameFrom) {
			nameTo[k] = nameFrom[k+1]
		} else {
			nameTo[k] = emEnd
		}
	}
	emMu.Unlock()
	overlap := func(k int) time.Duration {
		best := time.Duration(0)
		for _, l := range lives {
			if l.from.IsZero() {
				continue
			}
			from, to := maxTime(l.from, nameFrom[k]), minTime(l.to, nameTo[k])
			if to.After(from) {
				best = max(best, to.Sub(from)-within(gaps[k], from, to))
			}
		}
		return best
	}
	rx.mu.Lock()
	got := append([]delivery(nil), rx.got...)
	reqs, fails := rx.reqs, rx.fails
	rx.mu.Unlock()
	type alertKey struct{ name, span string }
	byAlert := map[alertKey][]delivery{}
	for _, d := range got {
		byAlert[alertKey{d.name, d.span}] = append(byAlert[alertKey{d.name, d.span}], d)
	}
	expected, delivered := 0, 0
	var missing []string
	for k := range nameFrom {
		span := fmt.Sprintf("%s.%d", prefix, k)
		for _, rule := range []struct {
			name string
			need time.Duration
		}{{"Hot", time.Second}, {"Held", 2 * time.Second}} {
			if overlap(k) < rule.need {
				continue
			}
			expected++
			firing := false
			for _, d := range byAlert[alertKey{rule.name, span}] {
				firing = firing || d.status == "firing"
			}
			if firing {
				delivered++
			} else {
				missing = append(missing, fmt.Sprintf("%s %s (flowed %s with an agent up)", rule.name, span, overlap(k).Round(time.Millisecond)))
			}
		}
	}
	// The same alert state twice: only with the same idempotency key. A
	// resolved whose endsAt is before the span stopped flowing, and not
	// in a stall of the emitter (the window the agent evaluated then
	// held no span): a false resolve. A new startsAt for the same span: a
	// new episode, which only a true resolve of the one before allows.
	stalled := func(k int, at time.Time) bool {
		const slack = 50 * time.Millisecond // the emitter's clock read after the span's end
		for _, g := range gaps[k] {
			if !at.Before(g.from.Add(-slack)) && !at.After(g.to.Add(slack)) {
				return true
			}
		}
		return false
	}
	sameKey, otherKey, refires, falseResolves, stallResolves := 0, 0, 0, 0, 0
	seen := map[string]string{}
	for ak, ds := range byAlert {
		k, _ := strconv.Atoi(strings.TrimPrefix(ak.span, prefix+"."))
		starts := map[time.Time]bool{}
		ended := map[time.Time]bool{} // by startsAt, the episodes truly resolved
		for _, d := range ds {
			id := fmt.Sprint(d.name, d.fingerprint, d.startsAt.UnixNano(), d.status)
			if key, ok := seen[id]; ok {
				if key == d.key {
					sameKey++
				} else {
					otherKey++
					t.Errorf("%s %s %s sent twice with different idempotency keys", ak.name, ak.span, d.status)
				}
			}
			seen[id] = d.key
			if d.status == "firing" {
				starts[d.startsAt] = true
			}
			if d.status == "resolved" {
				switch {
				case k >= len(nameTo) || !d.endsAt.Before(nameTo[k].Add(-300*time.Millisecond)):
					ended[d.startsAt] = true
				case stalled(k, d.endsAt):
					ended[d.startsAt] = true
					stallResolves++
				default:
					falseResolves++
					t.Errorf("%s %s resolved at %s while its spans flowed until %s", ak.name, ak.span, d.endsAt.Format("15:04:05.000"), nameTo[k].Format("15:04:05.000"))
				}
			}
		}
		order := slices.SortedFunc(maps.Keys(starts), time.Time.Compare)
		for i := 1; i < len(order); i++ {
			if !ended[order[i-1]] {
				refires++
				t.Errorf("%s %s fired again as a new episode at %s while the one of %s was not resolved", ak.name, ak.span, order[i].Format("15:04:05.000"), order[i-1].Format("15:04:05.000"))
			}
		}
	}
	hits := map[string]int{}
	for _, l := range lives {
		if l.hit {
			hits[l.point]++
		}
		// A SIGKILL leaves bbolt's file consistent (its meta page is
		// written last): the check at start must not take it for damage.
		if strings.Contains(l.stderr, "outbox_damaged") {
			t.Errorf("an outbox left by a kill was taken for damaged:\n%s", l.stderr)
		}
	}
	t.Logf("%d kills in %s (crash points hit: %v; the rest at random moments); %d names emitted; webhook: %d requests (%d answered 503)",
		kills, time.Since(began).Round(time.Second), hits, len(nameFrom), reqs, fails)
	t.Logf("alerts delivered %d / expected %d; duplicates: %d with the same idempotency key, %d with another; re-fires %d; false resolves %d (resolves in a stall of the emitter: %d)",
		delivered, expected, sameKey, otherKey, refires, falseResolves, stallResolves)
	for _, m := range missing {
		t.Errorf("never delivered: %s", m)
	}
	if expected < kills/3 {
		t.Errorf("only %d alerts expected: the test exercised too little", expected)
	}
	if !strings.Contains(final.stderr, "msg=stopped") {
		t.Errorf("the last agent did not stop cleanly:\n%s", final.stderr)
	}
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}
