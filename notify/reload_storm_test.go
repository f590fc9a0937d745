package notify

import (
	"net/http"
	"os"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/spanwatch/spanwatch/alert"
)

// TestReloadStorm reloads a dispatcher whose webhook is down (every
// attempt answered 503) many times a second, as a SIGHUP loop or a
// config-management run does, and counts the attempts the webhook sees:
// the backoff, the group timers and the retries in progress survive each
// reload, so the webhook sees the attempts of its backoff schedule, not one
// per reload. SPANWATCH_RELOAD_STORM sets the number of reloads (default
// 200, one every 10ms; the 1000 in 12s is
// SPANWATCH_RELOAD_STORM=1000 with 12ms).
func TestReloadStorm(t *testing.T) {
	reloads, every := 200, 10*time.Millisecond
	if v, _ := strconv.Atoi(os.Getenv("SPANWATCH_RELOAD_STORM")); v > 0 {
		reloads, every = v, 12*time.Millisecond
	}
	var attempts atomic.Int64
	rc := newReceiver(t, func(n int, w http.ResponseWriter, r *http.Request) bool {
		attempts.Add(1)
		w.WriteHeader(http.StatusServiceUnavailable)
		return true
	}).start()
	dir := t.TempDir()
	cfg := webhookConfig(t, rc.srv.URL, dir, "min_backoff: 500ms\nmax_backoff: 1m\ngroup_wait: 0s")
	d := mustNew(t, cfg)
	notifyOK(t, d, mkAlert("storm", 1, alert.StateFiring, time.Now()))
	waitFor(t, 5*time.Second, "the first attempt", func() bool { return attempts.Load() >= 1 })
	start := time.Now()
	for i := 0; i < reloads; i++ {
		// The file as re-read: an equal configuration, parsed again.
		if err := d.Reload(webhookConfig(t, rc.srv.URL, dir, "min_backoff: 500ms\nmax_backoff: 1m\ngroup_wait: 0s")); err != nil {
			t.Fatal(err)
		}
		time.Sleep(every)
	}
	took := time.Since(start)
	n := attempts.Load()
	// The backoff from 500ms doubling, with jitter (each wait at least
	// half its step): at most 1 + log2(took/250ms) + 1 attempts.
	limit := int64(2)
	for step := 250 * time.Millisecond; step < took; step *= 2 {
		limit++
	}
	t.Logf("%d reloads in %s: %d attempts to the down webhook (the backoff allows %d)", reloads, took.Round(time.Millisecond), n, limit)
	if n > limit {
		t.Errorf("%d attempts in %s of reloads, want at most %d: a reload reset the backoff", n, took.Round(time.Millisecond), limit)
	}
}
