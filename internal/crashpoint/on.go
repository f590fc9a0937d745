//go:build crashtest

package crashpoint

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

var (
	mu     sync.Mutex
	target string
	nth    int
	hits   = map[string]int{}
)

func init() {
	name, n, ok := strings.Cut(os.Getenv("SPANWATCH_CRASH_AT"), ":")
	if !ok {
		return
	}
	target = name
	nth, _ = strconv.Atoi(n)
}

// Hit kills the process with SIGKILL the Nth time the point
// $SPANWATCH_CRASH_AT names is reached. It says so on standard error,
// with the time in Unix nanoseconds: "crashpoint NAME:N: SIGKILL at T"
// (the process runs no code after it, though its exit may take seconds).
func Hit(name string) {
	if name != target {
		return
	}
	mu.Lock()
	hits[name]++
	n := hits[name]
	mu.Unlock()
	if n == nth {
		fmt.Fprintf(os.Stderr, "crashpoint %s:%d: SIGKILL at %d\n", name, n, time.Now().UnixNano())
		syscall.Kill(os.Getpid(), syscall.SIGKILL)
		select {} // the signal is on its way
	}
}
