// Command goloop is BenchmarkGoFuncVsSDK's traced program: it reads
// commands from standard input, "plain N" (N calls of work) or "sdk N" (N
// calls of work, each inside a span of the Go SDK, emit), and answers each
// with the nanoseconds per call, timed in the process so that start-up and
// the pipe are excluded. It runs until its input ends.
package main

import (
	"bufio"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/spanwatch/spanwatch/emit"
)

var sink uint64

// work is the traced function: small, kept out of line, a leaf with no
// stack check (a frame this small needs none).
//
//go:noinline
func work(x uint64) uint64 {
	sink += x
	return x * 3
}

func plain(n int) {
	for i := 0; i < n; i++ {
		work(uint64(i))
	}
}

func sdk(n int) {
	for i := 0; i < n; i++ {
		sp := emit.Start("bench_go_sdk")
		work(uint64(i))
		sp.End(nil)
	}
}

func main() {
	sc := bufio.NewScanner(os.Stdin)
	for sc.Scan() {
		mode, arg, _ := strings.Cut(sc.Text(), " ")
		n, err := strconv.Atoi(arg)
		if err != nil || n <= 0 {
			fmt.Fprintf(os.Stderr, "goloop: bad command %q\n", sc.Text())
			os.Exit(2)
		}
		run := plain
		switch mode {
		case "plain":
		case "sdk":
			run = sdk
		default:
			fmt.Fprintf(os.Stderr, "goloop: bad mode %q\n", mode)
			os.Exit(2)
		}
		t0 := time.Now()
		run(n)
		fmt.Printf("%.1f\n", float64(time.Since(t0).Nanoseconds())/float64(n))
	}
}
