// Command gostress calls three functions on many goroutines for a while,
// for source/function's TestGoStress: grow, whose big frame makes a new
// goroutine's stack grow (runtime.morestack copies the stack and restarts
// the call); rec, which recurses with big frames, so the stack grows and
// moves under calls in progress; and panicker, which panics on every
// third call for its caller to recover. Each goroutine runs a few rounds
// and exits, so new ones start with small stacks and reuse the exited
// ones' g. It prints "ready", waits for a line on stdin, runs for the
// duration its first argument gives, and prints how many calls of each
// function returned normally and how many panicked, then "done".
package main

import (
	"bufio"
	"fmt"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"time"
)

const (
	workers = 64
	depth   = 8 // rec's levels below the first
)

var grows, recs, panickerReturns, panics atomic.Int64

//go:noinline
func grow(n int) int {
	var buf [16 << 10]byte
	buf[n%len(buf)] = byte(n)
	for i := range 64 {
		buf[(n*i*31)%len(buf)] += byte(i)
	}
	grows.Add(1)
	return int(buf[(n*7)%len(buf)])
}

//go:noinline
func rec(n, d int) int {
	var buf [1536]byte
	buf[(n+d)%len(buf)] = byte(d)
	r := int(buf[(n*3)%len(buf)])
	if d > 0 {
		r += rec(n+1, d-1)
	} else {
		runtime.Gosched() // let the goroutine move to another thread mid-recursion
	}
	recs.Add(1)
	return r
}

//go:noinline
func panicker(n int) int {
	if n%3 == 0 {
		panics.Add(1)
		panic(fmt.Sprintf("call %d", n))
	}
	panickerReturns.Add(1)
	return n * 2
}

//go:noinline
func recovering(n int) (r int) {
	defer func() {
		if recover() != nil {
			r = -1
		}
	}()
	return panicker(n)
}

func main() {
	d, err := time.ParseDuration(os.Args[1])
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	fmt.Println("ready")
	bufio.NewReader(os.Stdin).ReadString('\n')
	stop := time.Now().Add(d)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for i := w; time.Now().Before(stop); i += workers {
				done := make(chan struct{})
				go func() { // a new goroutine: a small stack to grow
					defer close(done)
					for j := range 4 {
						n := i*4 + j
						grow(n)
						rec(n, depth)
						recovering(n)
					}
				}()
				<-done
			}
		})
	}
	wg.Wait()
	fmt.Printf("grow %d\nrec %d\npanicker %d\npanicked %d\ndone\n", grows.Load(), recs.Load(), panickerReturns.Load(), panics.Load())
}
