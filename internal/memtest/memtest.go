// Package memtest measures a test process's memory: its resident set and
// its Go heap, now and at their peaks while a test runs something. For
// tests and the figures they print (BENCHMARKS.md).
package memtest

import (
	"bufio"
	"os"
	"runtime/metrics"
	"strconv"
	"strings"
	"sync"
	"time"
)

// RSS is the process's resident set size in bytes (VmRSS), 0 where
// /proc/self/status cannot be read.
func RSS() int64 {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "VmRSS:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			return kb << 10
		}
	}
	return 0
}

// Heap is the Go heap's objects in bytes, live or not yet swept
// (/memory/classes/heap/objects:bytes).
func Heap() int64 {
	s := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
	metrics.Read(s)
	return int64(s[0].Value.Uint64())
}

// Peaks samples RSS and Heap every period until the returned function is
// called, which returns their peaks.
func Peaks(period time.Duration) func() (rss, heap int64) {
	done := make(chan struct{})
	var pr, ph int64
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			pr, ph = max(pr, RSS()), max(ph, Heap())
			select {
			case <-done:
				return
			case <-time.After(period):
			}
		}
	}()
	return func() (int64, int64) { close(done); wg.Wait(); return pr, ph }
}
