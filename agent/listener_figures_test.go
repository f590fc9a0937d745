//go:build linux

package agent

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/spanwatch/spanwatch/config"
	"github.com/spanwatch/spanwatch/internal/memtest"
)

// TestListenerFigures measures what the listener lets clients hold, for
// BENCHMARKS.md: the process's RSS and Go heap while six clients fetch
// /metrics at 10k series at once, and while five connections read their
// /metrics one byte a second. It only uses what the listener had before
// its limits (New, the exporter, serve), so the same file measures both.
// Run with SPANWATCH_LISTENER_FIGURES=1 (as root: the clients' sockets
// belong to other users); it takes about two minutes.
func TestListenerFigures(t *testing.T) {
	if os.Getenv("SPANWATCH_LISTENER_FIGURES") == "" {
		t.Skip("set SPANWATCH_LISTENER_FIGURES=1 to measure (about two minutes)")
	}
	if os.Geteuid() != 0 {
		t.Skip("needs root to make sockets as other users")
	}
	cfg, err := config.Parse("rules.yaml", []byte("rules: []\n"), config.LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	a, err := New(cfg, Options{ListenAddr: "127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	a.exporter.Observe(manySeries(10000))
	a.listener.serve()
	addr := a.Addr().String()
	get := func(uid int) (int, int64) {
		c := &http.Client{Transport: &http.Transport{DialContext: dialAs(uid), DisableKeepAlives: true}}
		req, _ := http.NewRequest(http.MethodGet, "http://"+addr+"/metrics", nil)
		req.Header.Set("Accept", "text/plain")
		resp, err := c.Do(req)
		if err != nil {
			t.Error(err)
			return 0, 0
		}
		n, _ := io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode, n
	}
	code, size := get(0)
	runtime.GC()
	t.Logf("one /metrics at 10k series: %d, %.1f MB (text)", code, float64(size)/1e6)
	rss0, heap0 := rssMB(), heapMB()
	t.Logf("idle: RSS %.0f MB, Go heap %.0f MB", rss0, heap0)

	for _, users := range []string{"one user", "six users"} {
		runtime.GC()
		peak := memtest.Peaks(5 * time.Millisecond)
		var wg sync.WaitGroup
		var mu sync.Mutex
		codes := map[int]int{}
		start := time.Now()
		for i := range 6 {
			uid := 0
			if users == "six users" {
				uid = 2000 + i
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				code, _ := get(uid)
				mu.Lock()
				codes[code]++
				mu.Unlock()
			}()
		}
		wg.Wait()
		rssB, heapB := peak()
		rss, heap := float64(rssB)/(1<<20), float64(heapB)/(1<<20)
		t.Logf("6 concurrent /metrics from %s: answers %v in %s; peak RSS %.0f MB (+%.0f), peak Go heap %.0f MB (+%.0f)",
			users, codes, time.Since(start).Round(time.Millisecond), rss, rss-rss0, heap, heap-heap0)
	}

	// Five connections, nobody's, reading one byte a second for a minute.
	runtime.GC()
	heap0 = heapMB()
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var answered sync.Map
	for i := range 5 {
		c, err := dialAs(nobody)(context.Background(), "tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(c, "GET /metrics HTTP/1.1\r\nHost: x\r\nAccept: text/plain\r\n\r\n")
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer c.Close()
			b := make([]byte, 1)
			var head []byte
			for {
				c.SetReadDeadline(time.Now().Add(time.Second))
				if _, err := c.Read(b); err == nil {
					head = append(head, b[0])
					if len(head) == 12 {
						answered.Store(i, string(head[9:]))
					}
				} else if !os.IsTimeout(err) {
					return
				}
				select {
				case <-stop:
					return
				case <-time.After(time.Second):
				}
			}
		}()
	}
	start := time.Now()
	var marks []string
	for _, at := range []time.Duration{5 * time.Second, 15 * time.Second, 30 * time.Second, 60 * time.Second} {
		time.Sleep(time.Until(start.Add(at)))
		// What the responses hold: the live heap after a collection (an
		// idle process collects nothing by itself).
		runtime.GC()
		marks = append(marks, fmt.Sprintf("%s: live Go heap %.0f MB (+%.0f), RSS %.0f MB", at, heapMB(), heapMB()-heap0, rssMB()))
	}
	close(stop)
	wg.Wait()
	var codes []string
	answered.Range(func(_, v any) bool { codes = append(codes, v.(string)); return true })
	t.Logf("5 slow readers (1 byte/s), answers %v:\n  %s", codes, strings.Join(marks, "\n  "))
}

func rssMB() float64  { return float64(memtest.RSS()) / (1 << 20) }
func heapMB() float64 { return float64(memtest.Heap()) / (1 << 20) }
